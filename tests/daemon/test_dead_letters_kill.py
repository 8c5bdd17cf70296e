"""A user function's dead letter is written once across a kill -9: the daemon (a subprocess, against
the real broker, without checkpoints) dead-letters a poisoned record, its epoch commits, it is
killed, and the restart, which replays the input from the beginning, finds that epoch final on the
result topic and does not write the dead letter again. (The subprocess helper is local to this file.)"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ddflow.daemon.deadletter import decode_dead_letter
from support.broker import FETCH_WAIT_MS, read_topic
from support.daemons import MS, Daemon, module_env, one_input_config, send, view_at

pytestmark = pytest.mark.kafka


FLOW = '''
def parse(row):
    return (row[0], int(row[1]))  # raises on a value that is not a number


def flow(df, inputs):
    return {"out": inputs["a"].map(parse).name("parsed")}
'''


def test_a_user_functions_dead_letter_is_not_written_again_after_a_kill(
        kafka_broker, make_topic, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, out, dead = make_topic("a"), make_topic("out"), make_topic("dead")
    (tmp_path / "poisonflow.py").write_text(FLOW)
    config = one_input_config(tmp_path / "daemon.toml", bootstrap, "poisonflow:flow", source, out, dead,
                              dataflow='on_error = "dead_letter"\n')
    daemon = Daemon(config, env=module_env(tmp_path))
    try:
        send(source, options, [("k", "1"), ("k", "x")], 1000 * MS)
        assert view_at(out, options, 1001 * MS) == {("k", 1): 1}  # its epoch committed, the dead letter with it
        assert len(read_topic(bootstrap, dead, 1)) == 1
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(timeout=30)
    finally:
        daemon.kill()

    again = Daemon(config, env=module_env(tmp_path))  # no checkpoint: it replays the input from the beginning
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
