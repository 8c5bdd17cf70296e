"""``--log-format json`` (env ``DDFLOW_LOG_FORMAT``): every line ``ddflow`` writes on stderr is one JSON
object with time, level, logger and message, and a failure's traceback as its ``exception`` field,
checked on a daemon that runs against the real broker until a user function fails, and on a
config error."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from support.broker import FETCH_WAIT_MS
from support.daemons import DDFLOW

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

FLOW = '''
def parse(row):
    return (int(row[0]),)  # raises on "x"


def flow(df, inputs):
    return {"out": inputs["a"].map(parse)}
'''


def json_lines(stderr: str) -> list[dict[str, str]]:
    """Every stderr line as a JSON object with the four fields (an assertion names a line that is not)."""
    lines = []
    for line in stderr.splitlines():
        entry = json.loads(line)  # raises on any line that is not JSON
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= entry.keys(), line
        assert TIME.fullmatch(entry["time"]), line
        lines.append(entry)
    return lines


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_"))}


def test_a_daemon_failing_on_a_user_function_logs_json_lines_only(
        kafka_broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    inp, out, dead = make_topic("a"), make_topic("out"), make_topic("dead")
    (tmp_path / "poisonflow.py").write_text(FLOW)
    config = tmp_path / "daemon.toml"
    config.write_text(f"""
[dataflow]
function = "poisonflow:flow"

[kafka]
bootstrap = "{bootstrap}"
group_id = "{inp}"

[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

[[inputs]]
name = "a"
topic = "{inp}"
fields = {{ v = "str" }}

[[outputs]]
name = "out"
topic = "{out}"

[epoch]
resolution = "1ms"

[dead_letter]
topic = "{dead}"

[metrics]
address = "127.0.0.1:0"
""")
    with UpdateProducer(inp, {"bootstrap.servers": bootstrap}) as producer:
        producer.insert(("1",), 1_000)
        producer.insert(("x",), 2_000)  # poison: the dataflow stops on it (the default policy)
        producer.advance_to(5_000_000)
    result = subprocess.run([DDFLOW, "--log-format", "json", "run", "--config", str(config), "--timeout", "120"],
                            capture_output=True, text=True, timeout=240, env={**env(), "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    lines = json_lines(result.stderr)
    assert any(e["level"] == "INFO" and e["message"].startswith("effective configuration: ") for e in lines)
    assert any(e["logger"].startswith("ddflow.") for e in lines)
    final = lines[-1]
    assert final["level"] == "ERROR" and final["message"].startswith("ddflow run: ")
    assert "map function parse" in final["message"] and "ValueError" in final["message"]
    # the traceback as a field: down to the user's function, with its own exception
    assert final["exception"].startswith("Traceback") and "poisonflow.py" in final["exception"]
    assert "ValueError: invalid literal for int()" in final["exception"]


def test_the_environment_selects_json_and_a_config_error_carries_its_exception(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    result = subprocess.run([DDFLOW, "check-config", str(missing)], capture_output=True, text=True, timeout=120,
                            env={**env(), "DDFLOW_LOG_FORMAT": "json"})
    assert result.returncode == 2
    [entry] = json_lines(result.stderr)
    assert entry["level"] == "ERROR" and entry["logger"] == "ddflow"
    assert entry["message"].startswith("ddflow check-config: invalid configuration:") and "missing.toml" in entry["message"]
    assert "ConfigError" in entry["exception"]


def test_text_stays_the_default_and_an_unknown_format_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    text = subprocess.run([DDFLOW, "check-config", str(missing)], capture_output=True, text=True, timeout=120, env=env())
    assert text.returncode == 2 and text.stderr.startswith("ddflow check-config: invalid configuration:")
    bad = subprocess.run([DDFLOW, "--log-format", "xml", "check-config", str(missing)], capture_output=True,
                         text=True, timeout=120, env=env())
    assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr
