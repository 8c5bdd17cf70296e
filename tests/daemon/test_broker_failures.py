"""``ddflow run`` against a broker that goes away, freezes or loses its topics, and a worker loop
that blocks: every case ends in a clear exit (or is ridden out), never in a silent hang.

Each test runs its own tansu broker (restarted on the same port, or frozen with SIGSTOP) and the
daemon as a subprocess, as a supervisor would run it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from daemon_support import FlowDaemon
from support.daemons import MS

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer

pytestmark = pytest.mark.kafka

@pytest.mark.parametrize("checkpoints", [False, True], ids=["replay", "checkpoints"])
def test_a_restarted_broker_stops_the_daemon_naming_the_topic(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon], checkpoints: bool) -> None:
    """The in-memory broker restarts on the same port while updates keep coming: its topics come
    back empty (auto-created by the producers' metadata requests, with other partition counts).
    Before, the daemon hung inside a transaction call with healthy probes, or polled the empty
    topics for minutes; now it exits 1 naming the topic."""
    extra = f'[checkpoint]\nlocation = "{tmp_path / "checkpoints"}"\ninterval = "200ms"\n' if checkpoints else ""
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only", extra=extra,
                    kafka='transaction_timeout = "5s"')
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
    stop = threading.Event()

    def feed() -> None:  # a producer that keeps sending through the restart
        t = 1001
        while not stop.is_set():
            try:
                with UpdateProducer(daemon.topics["a"], {**daemon.options, "message.timeout.ms": 2000}) as producer:
                    while not stop.is_set():
                        producer.insert((t, t), t * MS)
                        producer.advance_to((t + 1) * MS)
                        t += 1
                        time.sleep(0.01)
            except Exception:
                time.sleep(0.2)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(1.0)  # epochs are being published
        port = int(own_broker.bootstrap.rsplit(":", 1)[1])
        own_broker.stop()
        restarted = EmbeddedBroker(port=port, use_environment=False).start()
        try:
            assert daemon.exit_code() == 1, daemon.log
        finally:
            stop.set()
            feeder.join(30)
            restarted.stop()
    finally:
        stop.set()
    assert "Traceback" not in daemon.log
    named = [t for t in daemon.topics.values() if re.search(rf"topic '{re.escape(t)}' (vanished|was deleted and "
                                                            rf"recreated|shrank|grew)", daemon.log)]
    assert named, daemon.log
    assert f"ddflow run: " in daemon.log and "while the daemon ran" in daemon.log


def test_a_stalled_loop_fails_healthz_until_it_moves_again_and_sigterm_is_honoured(
        kafka_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    """The worker loop blocks inside an epoch (here: a map a test holds). /healthz answers 503
    naming what the loop is doing once it made no progress for worker.stall_timeout, 200 again when
    it moves on; SIGTERM while it is blocked exits 1 after worker.stop_timeout, naming where."""
    daemon = FlowDaemon(tmp_path, kafka_broker.bootstrap, flow="gated",
                    extra='\n[worker]\nstall_timeout = "1s"\nstop_timeout = "3s"\n')
    daemons.append(daemon)
    daemon.until(lambda: "metrics on" in daemon.log, "the endpoints serve")
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 1): 1}
    assert daemon.get("/healthz") == (200, "worker running\n")

    (daemon.gate / "hold").touch()
    daemon.send([(-1, 1)], 2000 * MS)
    daemon.until(lambda: (daemon.gate / "reached-1").exists(), "the map is reached")
    daemon.until(lambda: daemon.get("/healthz")[0] == 503, "/healthz fails")
    status, reason = daemon.get("/healthz")
    assert status == 503 and "worker loop stalled: no progress for" in reason, reason
    assert "running the dataflow" in reason and "worker.stall_timeout" in reason
    _, metrics = daemon.get("/metrics")
    loop = re.search(r'^ddflow_worker_loop_timestamp_seconds\{worker="0"\} (\S+)$', metrics, re.M)
    stalled_at = float(loop.group(1))
    assert 0 < stalled_at < time.time() - 1
    daemon.until(lambda: "worker loop stalled" in daemon.log and "in through" in daemon.log,
                 "the stall is logged with the loop's stack")

    (daemon.gate / "hold").unlink()  # the loop moves on
    assert daemon.wait_final(2000 * MS + MS) == {(1, 1): 1, (-1, 1): 1}
    daemon.until(lambda: daemon.get("/healthz")[0] == 200, "/healthz recovers")

    (daemon.gate / "hold").touch()
    daemon.send([(-2, 1)], 3000 * MS)
    daemon.until(lambda: (daemon.gate / "reached-2").exists(), "the map is reached again")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.exit_code() == 1, daemon.log
    assert "did not finish within 3 s (worker.stop_timeout)" in daemon.log
    assert "in through" in daemon.log  # the stack says where the loop is blocked
    (daemon.gate / "hold").unlink()


def _freeze_during_publish(daemon: FlowDaemon, own_broker: EmbeddedBroker) -> None:
    """Hold an epoch in the engine, freeze the broker, release the epoch: it publishes into the freeze."""
    daemon.until(lambda: "metrics on" in daemon.log, "the endpoints serve")
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 1): 1}
    (daemon.gate / "hold").touch()
    daemon.send([(-1, 1)], 2000 * MS)
    daemon.until(lambda: (daemon.gate / "reached-1").exists(), "the map is reached")
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    (daemon.gate / "hold").unlink()


def test_a_broker_stall_beyond_the_transaction_timeout_exits_1_naming_it(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="gated", kafka='transaction_timeout = "2s"')
    daemons.append(daemon)
    _freeze_during_publish(daemon, own_broker)
    try:
        assert daemon.exit_code() == 1, daemon.log
    finally:
        assert own_broker.pid is not None
        os.kill(own_broker.pid, signal.SIGCONT)
    assert "Traceback" not in daemon.log
    # the broker watch says it while the broker is away, before the commit's own bound runs out
    assert re.search(r"ddflow run: the broker at \S+ has not answered for \d+ s .*longer than "
                     r"kafka\.transaction_timeout \(2 s\): exiting while .*1 published epochs waiting for their "
                     r"commit", daemon.log), daemon.log


def test_a_broker_stall_within_the_transaction_timeout_is_ridden_out(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="gated", kafka='transaction_timeout = "60s"',
                    extra='\n[worker]\nstall_timeout = "2m"\n')
    daemons.append(daemon)
    _freeze_during_publish(daemon, own_broker)
    time.sleep(12)  # longer than a 10 s default of any client call; shorter than the 60 s configured
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGCONT)
    assert daemon.wait_final(2000 * MS + MS) == {(1, 1): 1, (-1, 1): 1}
    assert daemon.process.poll() is None, daemon.log
    assert daemon.get("/healthz")[0] == 200
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.exit_code() == 0, daemon.log


def test_sigterm_while_a_transaction_waits_on_a_frozen_broker_exits_within_the_stop_timeout(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    """The loop is inside librdkafka (a commit waiting on a frozen broker), where no signal handler of
    its thread can run: SIGTERM still ends the process once the broker is seen silent (3 s), naming
    the step, long before worker.stop_timeout."""
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="gated", kafka='transaction_timeout = "60s"',
                    extra='\n[worker]\nstop_timeout = "60s"\n')
    daemons.append(daemon)
    _freeze_during_publish(daemon, own_broker)
    try:
        time.sleep(1.0)  # the epoch is being published into the freeze
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.exit_code(timeout=30) == 1, daemon.log  # the stop timeout, 60 s, was not waited out
    finally:
        assert own_broker.pid is not None
        os.kill(own_broker.pid, signal.SIGCONT)
    assert re.search(r"ddflow run: stopping while the broker at \S+ does not answer .* exiting while epoch \[",
                     daemon.log), daemon.log
    assert "publishing" in daemon.log and "Traceback" not in daemon.log
