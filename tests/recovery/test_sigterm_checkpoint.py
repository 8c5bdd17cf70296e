"""SIGTERM while a checkpoint is being written: the daemon finishes that checkpoint and its final one,
exits 0, leaves no staging directory, and its restart resumes from the final checkpoint with the
output exact. The write is held in the middle (its files written, its manifest not yet renamed into
place) by the test's dataflow module, which wraps the snapshot writer's commit while a gate file
exists, and notes when the SIGTERM reaches the worker; the daemon runs as a subprocess against the
real broker."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from support.broker import FETCH_WAIT_MS
from support.daemons import MS, Daemon, module_env, one_input_config, send, view_at

from ddflow.daemon.state.checkpoint import CheckpointStore

pytestmark = pytest.mark.kafka

FLOW = '''
import os, threading, time

from ddflow.daemon import worker
from ddflow.daemon.state import snapshot

GATE = os.environ["CHECKPOINT_GATE"]
_commit = snapshot.SnapshotWriter.commit


def held_commit(self, *args, **kwargs):
    """A background checkpoint waits here, its files written, while GATE/hold exists."""
    if threading.current_thread().name == "ddflow-checkpoint-writer" and os.path.exists(os.path.join(GATE, "hold")):
        open(os.path.join(GATE, "writing"), "w").close()
        while os.path.exists(os.path.join(GATE, "hold")):
            time.sleep(0.02)
    return _commit(self, *args, **kwargs)


snapshot.SnapshotWriter.commit = held_commit
_stop = worker.Worker.stop


def stop(self, *args, **kwargs):
    """The daemon's SIGTERM reached the worker: say so in GATE/stopping."""
    open(os.path.join(GATE, "stopping"), "w").close()
    return _stop(self, *args, **kwargs)


worker.Worker.stop = stop


def flow(df, inputs):
    return {"out": inputs["a"].map(lambda r: (r[0], r[1] + 1))}
'''


def test_sigterm_in_the_middle_of_a_checkpoint_finishes_it_and_the_restart_resumes_exactly(
        kafka_broker, make_topic, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, out, dead = make_topic("a"), make_topic("out"), make_topic("dead")
    (tmp_path / "heldflow.py").write_text(FLOW)
    gate, checkpoints = tmp_path / "gate", tmp_path / "checkpoints"
    gate.mkdir()
    config = one_input_config(tmp_path / "daemon.toml", bootstrap, "heldflow:flow", source, out, dead,
                              sections=f'\n[checkpoint]\nlocation = "{checkpoints}"\ninterval = "100ms"\n')
    (gate / "hold").touch()
    daemon = Daemon(config, env=module_env(tmp_path, CHECKPOINT_GATE=str(gate)))
    try:
        send(source, options, [(1, 1)], 1000 * MS)
        assert view_at(out, options, 1001 * MS) == {(1, 2): 1}
        send(source, options, [(2, 2)], 1002 * MS)  # epochs go on while the checkpoint is held
        daemon.wait_for_file(gate / "writing")
        assert view_at(out, options, 1003 * MS) == {(1, 2): 1, (2, 3): 1}
        assert list(checkpoints.glob(".checkpoint-*.tmp-*")) or list(checkpoints.glob(".*tmp*")), \
            sorted(p.name for p in checkpoints.iterdir())  # the held write: staged, not in place
        daemon.process.send_signal(signal.SIGTERM)
        daemon.wait_for_file(gate / "stopping")  # the SIGTERM reached the worker, the write still held
        (gate / "hold").unlink()  # the held write goes on
        assert daemon.exit_code() == 0, daemon.log
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
    assert "Traceback" not in daemon.log
    leftovers = [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers
    latest = CheckpointStore(checkpoints).latest()
    assert latest is not None and latest.frontier >= 1003 * MS  # the final checkpoint has everything published

    again = Daemon(config, env=module_env(tmp_path, CHECKPOINT_GATE=str(gate)))  # no hold: nothing waits
    try:
        restored = again.wait_for(r"restoring checkpoint (\S+) at frontier (\d+)")
        assert restored.group(1) == latest.path.name and int(restored.group(2)) == latest.frontier
        send(source, options, [(1, 1)], 1004 * MS)  # a second copy of (1, 1)
        assert view_at(out, options, 1005 * MS) == {(1, 2): 2, (2, 3): 1}
        again.process.send_signal(signal.SIGTERM)
        assert again.exit_code() == 0, again.log
    finally:
        if again.process.poll() is None:
            again.process.kill()
