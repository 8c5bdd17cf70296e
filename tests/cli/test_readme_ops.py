"""The README's commands and the operational examples of docs/ cannot go stale: the two first commands,
the quick start, the configuration reference (docs/configuration.md), the metrics table (docs/operations.md)."""

from __future__ import annotations

import re
from pathlib import Path

from ddflow.config import parse_config, resolve_dataflow
from ddflow.daemon.observe.metrics import METRIC_NAMES
from support.daemons import free_port
from support.docs import README, example, section

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_first_two_commands_are_the_demo_and_the_ci_test_command() -> None:
    (lang1, demo), (lang2, tests) = BLOCKS[:2]
    assert lang1 == lang2 == "bash"
    assert (demo, tests) == (example("demo-command"), example("test-command"))
    assert demo.strip() == "python3 -m venv .venv && .venv/bin/pip install -q -e '.[broker]' && .venv/bin/ddflow demo"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests.strip() in ci.splitlines()


def test_configuration_snippet_is_a_valid_config(tmp_path: Path) -> None:
    toml = example("config-reference", "toml")
    config = parse_config(toml, tmp_path / "daemon.toml")
    assert [i.name for i in config.inputs] == ["edges"] and config.kafka.secrets
    assert resolve_dataflow(config).__name__ == "reachability"


def test_metrics_table_lists_exactly_the_exported_names() -> None:
    names = re.findall(r"^\| `(ddflow_\w+)` \|", section("operations.md", "Metrics"), flags=re.M)
    assert names == list(METRIC_NAMES)


def test_quick_start_commands_run_as_written(tmp_path: Path) -> None:
    """The "Running your own dataflow" block, on a free port instead of 9092, with a tail stopped
    once it has shown the edge's pair (or after 60 s)."""
    import os
    import signal
    import subprocess
    import sys

    block = example("quick-start", "bash")
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    script = block.replace("127.0.0.1:9092", f"127.0.0.1:{port}").replace(".venv/bin", bin_dir)
    script = script.replace("ddflow tail --topic reachable",
                            "ddflow tail --topic reachable --duration 60 & echo tail-pid: $!; wait $!")
    script = (f"set -u\ncd {ROOT}\ntrap 'kill -TERM $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
              + "\necho run-pids: $(jobs -p)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "DDFLOW_"))}
    env.update({"DDFLOW_BROKER_PORT": str(port), "DDFLOW_METRICS_ADDRESS": "127.0.0.1:0",
                "DDFLOW_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"})

    def shown(out: str) -> bool:
        # tail prints the view at the frontier, then live changes: depending on how far the daemon
        # got when tail started, the edge's pair is in the view or arrives as a change at its time
        return ("view at frontier 2000000000: 11 records" in out and "  (0, 1)\n" in out
                or "  +1 (0, 1) @ 1000000000\n" in out)

    with open(tmp_path / "stderr", "w+") as err:
        process = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        try:
            assert process.stdout is not None
            lines: list[str] = []
            tail = None
            for line in process.stdout:  # ends when the script does: its tail stops after 60 s at most
                lines.append(line)
                if line.startswith("tail-pid: "):
                    tail = int(line.split()[1])
                if tail is not None and shown("".join(lines)):
                    os.kill(tail, signal.SIGTERM)
                    break
            out = "".join(lines) + process.communicate(timeout=240)[0]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        err.seek(0)
        errors = err.read()
    assert process.returncode == 0, out + errors
    assert "ok: config/examples/reachability.toml" in out
    assert shown(out), out + errors
