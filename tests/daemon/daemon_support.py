"""``ddflow run`` on one of the dataflows of ``flows.py``, with topics of its own: what the tests of a
daemon against a failing broker or a stalled loop start (`test_broker_failures`, `test_liveness`)."""

from __future__ import annotations

import time
from pathlib import Path

from support.broker import FETCH_WAIT_MS, create_topic
from support.daemons import Daemon, free_port, send, view_at

HERE = Path(__file__).resolve().parent


class FlowDaemon(Daemon):
    """``ddflow run`` of ``flows:<flow>`` reading input ``a`` (fields k, v) and publishing output
    ``out``, each on a fresh topic (``topics``: a, out, dead), its metrics on a port of its own.
    ``gated`` gets ``gate``, a folder whose files hold its map (see flows.py); ``kafka``: more lines
    of the [kafka] table, ``extra``: more tables."""

    def __init__(self, tmp_path: Path, bootstrap: str, *, flow: str, extra: str = "", kafka: str = "",
                 start: bool = True) -> None:
        self.gate = tmp_path / "gate"
        self.gate.mkdir()
        self.topics = {name: create_topic(bootstrap, f"{name}-{tmp_path.name[-20:]}-{time.time_ns() % 10**8}")
                       for name in ("a", "out", "dead")}
        port = free_port()
        config = tmp_path / "daemon.toml"
        config.write_text(f"""
[dataflow]
function = "flows:{flow}"
path = ["{HERE}"]
args = {{ {'gate = "' + str(self.gate) + '"' if flow == "gated" else ""} }}

[kafka]
bootstrap = "{bootstrap}"
group_id = "{self.topics['a']}"
{kafka}
[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

[[inputs]]
name = "a"
topic = "{self.topics['a']}"
fields = ["k", "v"]

[[outputs]]
name = "out"
topic = "{self.topics['out']}"

[dead_letter]
topic = "{self.topics['dead']}"

[metrics]
address = "127.0.0.1:{port}"
{extra}
""")
        self.options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
        super().__init__(config, port=port, start=start)

    def send(self, records: list[tuple[int, int]], t: int) -> None:
        send(self.topics["a"], self.options, records, t)

    def wait_final(self, frontier: int) -> dict:
        """The output's view once its frontier reaches ``frontier``."""
        return view_at(self.topics["out"], self.options, frontier, timeout=90, log=lambda: self.log)
