"""A user function's dead letter is written once across a kill -9: the daemon (a subprocess, against
the real broker, without checkpoints) dead-letters a poisoned record, its epoch commits, it is
killed, and the restart, which replays the input from the beginning, finds that epoch final on the
result topic and does not write the dead letter again. (The subprocess helper is local to this file.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddflow.daemon.deadletter import decode_dead_letter
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient
from support.broker import read_topic

pytestmark = pytest.mark.kafka

DDFLOW = str(Path(sys.executable).parent / "ddflow")
MS = 1_000_000

FLOW = '''
def parse(row):
    return (row[0], int(row[1]))  # raises on a value that is not a number


def flow(df, inputs):
    return {"out": inputs["a"].map(parse).name("parsed")}
'''


class Daemon:
    def __init__(self, config: Path, module_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_"))}
        env["PYTHONPATH"] = str(module_dir)
        self.process = subprocess.Popen([DDFLOW, "run", "--config", str(config)], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.process.stdout or ()), daemon=True).start()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.log) is None:
            assert time.monotonic() < deadline and self.process.poll() is None, f"no {pattern!r}:\n{self.log}"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def send(topic: str, options: dict, records: list[tuple[str, str]], t: int) -> None:
    with UpdateProducer(topic, options) as producer:
        for record in records:
            producer.insert(record, t)
        producer.advance_to(t + MS)


def view_at(topic: str, options: dict, frontier: int) -> dict:
    with ResultClient(topic, options) as client:
        assert client.wait_for(frontier, timeout=120)
        return dict(client.view)


def test_a_user_functions_dead_letter_is_not_written_again_after_a_kill(
        kafka_broker, make_topic, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 10}
    source, out, dead = make_topic("a"), make_topic("out"), make_topic("dead")
    (tmp_path / "poisonflow.py").write_text(FLOW)
    config = tmp_path / "daemon.toml"
    config.write_text(f"""
[dataflow]
function = "poisonflow:flow"
on_error = "dead_letter"

[kafka]
bootstrap = "{bootstrap}"
group_id = "{source}"

[kafka.options]
"fetch.wait.max.ms" = 10

[[inputs]]
name = "a"
topic = "{source}"
fields = ["k", "v"]

[[outputs]]
name = "out"
topic = "{out}"

[dead_letter]
topic = "{dead}"

[metrics]
address = "127.0.0.1:0"
""")
    daemon = Daemon(config, tmp_path)
    try:
        send(source, options, [("k", "1"), ("k", "x")], 1000 * MS)
        assert view_at(out, options, 1001 * MS) == {("k", 1): 1}  # its epoch committed, the dead letter with it
        assert len(read_topic(bootstrap, dead, 1)) == 1
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(timeout=30)
    finally:
        daemon.kill()

    again = Daemon(config, tmp_path)  # no checkpoint: it replays the input from the beginning
    try:
        again.wait_for("worker open")
        send(source, options, [("k", "2")], 1002 * MS)
        assert view_at(out, options, 1003 * MS) == {("k", 1): 1, ("k", 2): 1}
        again.process.send_signal(signal.SIGTERM)
        assert again.process.wait(timeout=120) == 0, again.log
    finally:
        again.kill()
    letters = read_topic(bootstrap, dead, 1)
    assert len(letters) == 1, [m.key() for m in letters]  # written once, though the record was replayed
    letter = decode_dead_letter(letters[0].value(), letters[0].headers(), letters[0].key())
    assert letter.reason == "user_function" and letter.raw == b'["k", "x"]'
    assert "poisonflow.py:2) in 'parsed' raised ValueError" in letter.detail  # the operator's given name
    assert dict(letters[0].headers())["ddflow.name"] == b"parsed"
