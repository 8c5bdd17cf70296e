"""Liveness that tells the truth, against a broker of each test's own: a fenced daemon exits at
once naming the transactional id; a frozen broker is said within seconds, fails /readyz and sets
``ddflow_broker_answering``, and the daemon resumes exactly when it answers again; a broker not up
at start is waited for (up to ``kafka.connect_timeout``), and SIGTERM is served in every state."""

from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from daemon_support import FlowDaemon
from support.daemons import DDFLOW, MS, free_port, refused_port

from ddflow.daemon.kafka.broker import EmbeddedBroker

pytestmark = pytest.mark.kafka


def answering(daemon: FlowDaemon) -> str | None:
    """The value of ``ddflow_broker_answering`` on the daemon's /metrics (None: not exported)."""
    try:
        _, text = daemon.get("/metrics")
    except OSError:
        return None
    found = re.search(r'^ddflow_broker_answering\{worker="0"\} (\S+)$', text, re.M)
    return None if found is None else found.group(1)


def test_a_fenced_daemon_exits_at_once_naming_the_transactional_id(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    """Two daemons with one config: the second's transactions fence the first, which, idle, learns
    it within seconds and exits 3 saying so (before: it ran on with /healthz 200 until SIGTERM); 3 is
    the code supervisors are told not to restart on, so the two never fence each other in turn."""
    first = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only")
    daemons.append(first)
    first.send([(1, 1)], 1000 * MS)
    assert first.wait_final(1000 * MS) == {(1, 2): 1}
    second = copy.copy(first)  # the same config file and topics, its own metrics port
    second.lines, second.port = [], free_port()
    second.start("--metrics-address", f"127.0.0.1:{second.port}")
    daemons.append(second)
    assert first.exit_code(timeout=60) == 3, first.log  # seconds after the other starts (before: never)
    assert re.search(r"ddflow run: fenced: another instance initialised transactions with transactional.id "
                     r"'ddflow-a-\S+' \(a second daemon with this config", first.log), first.log
    assert "Traceback" not in first.log
    second.send([(2, 2)], 2000 * MS)  # the instance that took over publishes, exactly
    assert second.wait_final(2000 * MS) == {(1, 2): 1, (2, 3): 1}
    assert second.process.poll() is None and second.get("/healthz")[0] == 200, second.log


def test_a_frozen_broker_is_said_fails_readyz_and_is_ridden_out_exactly(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only", kafka='transaction_timeout = "60s"')
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
    daemon.until(lambda: daemon.get("/readyz")[0] == 200, "ready")
    assert answering(daemon) == "1.0"
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    try:
        daemon.until(lambda: "has not answered for" in daemon.log, "the freeze is logged", timeout=20)
        status, reason = daemon.get("/readyz")
        assert status == 503 and re.match(r"the broker at \S+ has not answered for \d+ s", reason), reason
        assert answering(daemon) == "0.0"
        assert daemon.get("/healthz")[0] == 200  # alive: a restart would not bring the broker back
    finally:
        os.kill(own_broker.pid, signal.SIGCONT)
    daemon.until(lambda: "answers again after" in daemon.log, "the thaw is logged", timeout=20)
    daemon.until(lambda: daemon.get("/readyz")[0] == 200, "ready again", timeout=20)
    daemon.send([(2, 2)], 2000 * MS)
    assert daemon.wait_final(2000 * MS) == {(1, 2): 1, (2, 3): 1}
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.exit_code(timeout=30) == 0, daemon.log


def test_a_freeze_longer_than_the_transaction_timeout_exits_while_the_broker_is_away(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    """Idle, nothing in flight: only the watch sees the freeze (before, the daemon noticed nothing
    until the broker came back)."""
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only", kafka='transaction_timeout = "4s"')
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    try:
        assert daemon.exit_code(timeout=40) == 1, daemon.log
    finally:
        os.kill(own_broker.pid, signal.SIGCONT)
    assert re.search(r"ddflow run: the broker at \S+ has not answered for \d+ s .*longer than "
                     r"kafka.transaction_timeout \(4 s\)", daemon.log), daemon.log


def test_sigterm_during_a_freeze_is_served_at_once_when_idle(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only", kafka='transaction_timeout = "60s"',
                    extra='\n[worker]\nstop_timeout = "60s"\n')
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    try:
        daemon.until(lambda: "has not answered for" in daemon.log, "the freeze is logged", timeout=20)
        daemon.process.send_signal(signal.SIGTERM)
        code = daemon.exit_code(timeout=20)  # not the 60 s stop timeout
    finally:
        os.kill(own_broker.pid, signal.SIGCONT)
    # idle, nothing was left to publish: the loop may finish first (0), or the supervisor, seeing the
    # broker silent, ends the process (1, saying so); mid-commit, see test_broker_failures.py
    assert code == 0 or (code == 1 and "ddflow run: stopping while the broker at" in daemon.log), daemon.log


def test_a_broker_not_answering_at_start_is_waited_for_then_the_daemon_resumes_exactly(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="map_only", start=False)
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    try:
        daemon.start()
        daemon.until(lambda: "waiting for the broker at" in daemon.log, "the wait is logged", timeout=30)
        daemon.until(lambda: daemon.get("/readyz")[1].startswith("waiting for the broker at"), "/readyz says it")
        assert daemon.get("/readyz")[0] == 503 and answering(daemon) == "0.0"
        assert daemon.process.poll() is None
    finally:
        os.kill(own_broker.pid, signal.SIGCONT)
    assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
    daemon.send([(2, 2)], 2000 * MS)
    assert daemon.wait_final(2000 * MS) == {(1, 2): 1, (2, 3): 1}
    assert answering(daemon) == "1.0"
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.exit_code(timeout=30) == 0, daemon.log


def _unreachable_config(tmp_path: Path, connect_timeout: str, broker_port: int) -> tuple[Path, int]:
    """A daemon's config whose broker is at ``broker_port`` (a :func:`refused_port`), with its metrics
    port."""
    port = free_port()
    config = tmp_path / "daemon.toml"
    config.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:reachability"
[kafka]
bootstrap = "127.0.0.1:{broker_port}"
connect_timeout = "{connect_timeout}"
[[inputs]]
name = "edges"
topic = "edges"
fields = ["src", "dst"]
[[outputs]]
name = "reachable"
topic = "reachable"
[metrics]
address = "127.0.0.1:{port}"
""")
    return config, port


def test_past_kafka_connect_timeout_the_daemon_exits_saying_the_broker_is_unreachable(tmp_path: Path) -> None:
    with refused_port() as broker_port:
        config, _ = _unreachable_config(tmp_path, "2s", broker_port)
        done = subprocess.run([DDFLOW, "run", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    said = [line for line in done.stderr.splitlines() if line.startswith("ddflow run: ")]
    assert len(said) == 1 and re.match(r"ddflow run: the broker at 127.0.0.1:\d+ is unreachable: .* \(no answer within "
                                       r"2 s, kafka.connect_timeout\); is it running", said[0]), done.stderr
    assert "Traceback" not in done.stderr


def test_sigterm_while_waiting_for_the_broker_at_start_exits_0(tmp_path: Path) -> None:
    with refused_port() as broker_port:
        _sigterm_while_waiting(*_unreachable_config(tmp_path, "5m", broker_port))


def _sigterm_while_waiting(config: Path, port: int) -> None:
    process = subprocess.Popen([DDFLOW, "run", "--config", str(config)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        lines: list[str] = []
        assert process.stdout is not None
        for line in process.stdout:  # the wait is said before SIGTERM
            lines.append(line)
            if "waiting for the broker at" in line:
                break
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_mid_epoch_publishes_it_writes_a_checkpoint_and_exits_0(
        own_broker: EmbeddedBroker, tmp_path: Path, daemons: list[FlowDaemon]) -> None:
    """SIGTERM while an epoch runs (a map held by the test): the epoch is published, a checkpoint is
    written at its frontier, and the daemon exits 0, without waiting out worker.stop_timeout."""
    extra = (f'[checkpoint]\nlocation = "{tmp_path / "checkpoints"}"\ninterval = "200ms"\n'
             '[worker]\nstop_timeout = "60s"\n')
    daemon = FlowDaemon(tmp_path, own_broker.bootstrap, flow="gated", extra=extra)
    daemons.append(daemon)
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 1): 1}
    (daemon.gate / "hold").touch()
    daemon.send([(-1, 1)], 2000 * MS)
    daemon.until(lambda: (daemon.gate / "reached-1").exists(), "the map is reached")
    daemon.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the stop is asked for while the epoch runs
    (daemon.gate / "hold").unlink()
    assert daemon.exit_code(timeout=30) == 0, daemon.log
    assert daemon.wait_final(2000 * MS + MS) == {(1, 1): 1, (-1, 1): 1}
    assert re.search(r"checkpoint checkpoint-\d+ at frontier 2001000000", daemon.log), daemon.log


def test_the_watch_of_an_unreachable_broker_says_so_and_waits_with_backoff(caplog) -> None:
    import logging
    import threading

    from ddflow.daemon.kafka.liveness import BrokerWatch

    with refused_port() as port:  # (at a free port another test's broker may start meanwhile, and answer)
        address = f"127.0.0.1:{port}"
        watch = BrokerWatch({"bootstrap.servers": address}, timeout=0.5, said_after=0.0)
        stop = threading.Event()
        with caplog.at_level(logging.INFO, logger="ddflow.daemon.broker"):
            assert not watch.wait(1.0, stop)  # the limit ran out
        assert not watch.answering and watch.answered is None and watch.error
        assert watch.reason().startswith(f"waiting for the broker at {address} for ")
        said = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
        assert len(said) == 1 and address in said[0]  # said once, not at every probe
        stop.set()
        assert not watch.wait(60.0, stop)  # a stop ends the wait at once
        watch.close()
