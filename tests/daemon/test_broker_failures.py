"""``ddflow run`` against a broker that goes away, freezes or loses its topics, and a worker loop
that blocks: every case ends in a clear exit (or is ridden out), never in a silent hang.

Each test runs its own tansu broker (restarted on the same port, or frozen with SIGSTOP) and the
daemon as a subprocess, as a supervisor would run it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.broker import create_topic

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka

DDFLOW = str(Path(sys.executable).parent / "ddflow")
HERE = Path(__file__).resolve().parent
MS = 1_000_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    """A broker of this test's own (it is restarted or frozen)."""
    started = EmbeddedBroker(port=_free_port(), use_environment=False).start()
    try:
        yield started
    finally:
        if started.pid is not None:
            os.kill(started.pid, signal.SIGCONT)  # a frozen broker must be able to stop
        started.stop()


class Daemon:
    """``ddflow run`` on a config written for ``broker``; output collected by a thread."""

    def __init__(self, tmp_path: Path, bootstrap: str, *, flow: str, extra: str = "", kafka: str = "",
                 start: bool = True) -> None:
        self.gate = tmp_path / "gate"
        self.gate.mkdir()
        self.topics = {name: create_topic(bootstrap, f"{name}-{tmp_path.name[-20:]}-{time.time_ns() % 10**8}")
                       for name in ("a", "out", "dead")}
        self.port = _free_port()
        self.config = tmp_path / "daemon.toml"
        self.config.write_text(f"""
[dataflow]
function = "flows:{flow}"
path = ["{HERE}"]
args = {{ {'gate = "' + str(self.gate) + '"' if flow == "gated" else ""} }}

[kafka]
bootstrap = "{bootstrap}"
group_id = "{self.topics['a']}"
{kafka}
[kafka.options]
"fetch.wait.max.ms" = 10

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
address = "127.0.0.1:{self.port}"
{extra}
""")
        self.options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 10}
        self.lines: list[str] = []
        if start:
            self.start()

    def start(self, *args: str) -> None:
        """Run ``ddflow run`` on the config (``args``: more options)."""
        self.process = subprocess.Popen([DDFLOW, "run", "--config", str(self.config), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def until(self, condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{self.log}"
            time.sleep(0.1)

    def send(self, records: list[tuple[int, int]], t: int) -> None:
        with UpdateProducer(self.topics["a"], self.options) as producer:
            for record in records:
                producer.insert(record, t)
            producer.advance_to(t + MS)

    def wait_final(self, frontier: int) -> dict:
        with ResultClient(self.topics["out"], self.options) as client:
            assert client.wait_for(frontier, timeout=90), self.log
            return client.view

    def exit_code(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within {timeout} s:\n{self.log}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.kill()


@pytest.mark.parametrize("checkpoints", [False, True], ids=["replay", "checkpoints"])
def test_a_restarted_broker_stops_the_daemon_naming_the_topic(
        broker: EmbeddedBroker, tmp_path: Path, daemons: list[Daemon], checkpoints: bool) -> None:
    """The in-memory broker restarts on the same port while updates keep coming: its topics come
    back empty (auto-created by the producers' metadata requests, with other partition counts).
    Before, the daemon hung inside a transaction call with healthy probes, or polled the empty
    topics for minutes; now it exits 1 naming the topic."""
    extra = f'[checkpoint]\nlocation = "{tmp_path / "checkpoints"}"\ninterval = "200ms"\n' if checkpoints else ""
    daemon = Daemon(tmp_path, broker.bootstrap, flow="map_only", extra=extra,
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
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        broker.stop()
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
        kafka_broker: EmbeddedBroker, tmp_path: Path, daemons: list[Daemon]) -> None:
    """The worker loop blocks inside an epoch (here: a map a test holds). /healthz answers 503
    naming what the loop is doing once it made no progress for worker.stall_timeout, 200 again when
    it moves on; SIGTERM while it is blocked exits 1 after worker.stop_timeout, naming where."""
    daemon = Daemon(tmp_path, kafka_broker.bootstrap, flow="gated",
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


def _freeze_during_publish(daemon: Daemon, broker: EmbeddedBroker) -> None:
    """Hold an epoch in the engine, freeze the broker, release the epoch: it publishes into the freeze."""
    daemon.until(lambda: "metrics on" in daemon.log, "the endpoints serve")
    daemon.send([(1, 1)], 1000 * MS)
    assert daemon.wait_final(1000 * MS) == {(1, 1): 1}
    (daemon.gate / "hold").touch()
    daemon.send([(-1, 1)], 2000 * MS)
    daemon.until(lambda: (daemon.gate / "reached-1").exists(), "the map is reached")
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)
    (daemon.gate / "hold").unlink()


def test_a_broker_stall_beyond_the_transaction_timeout_exits_1_naming_it(
        broker: EmbeddedBroker, tmp_path: Path, daemons: list[Daemon]) -> None:
    daemon = Daemon(tmp_path, broker.bootstrap, flow="gated", kafka='transaction_timeout = "2s"')
    daemons.append(daemon)
    _freeze_during_publish(daemon, broker)
    try:
        assert daemon.exit_code() == 1, daemon.log
    finally:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGCONT)
    assert "Traceback" not in daemon.log
    # the broker watch says it while the broker is away, before the commit's own bound runs out
    assert re.search(r"ddflow run: the broker at \S+ has not answered for \d+ s .*longer than "
                     r"kafka\.transaction_timeout \(2 s\): exiting while .*1 published epochs waiting for their "
                     r"commit", daemon.log), daemon.log


def test_a_broker_stall_within_the_transaction_timeout_is_ridden_out(
        broker: EmbeddedBroker, tmp_path: Path, daemons: list[Daemon]) -> None:
    daemon = Daemon(tmp_path, broker.bootstrap, flow="gated", kafka='transaction_timeout = "60s"',
                    extra='\n[worker]\nstall_timeout = "2m"\n')
    daemons.append(daemon)
    _freeze_during_publish(daemon, broker)
    time.sleep(12)  # longer than a 10 s default of any client call; shorter than the 60 s configured
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGCONT)
    assert daemon.wait_final(2000 * MS + MS) == {(1, 1): 1, (-1, 1): 1}
    assert daemon.process.poll() is None, daemon.log
    assert daemon.get("/healthz")[0] == 200
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.exit_code() == 0, daemon.log


def test_sigterm_while_a_transaction_waits_on_a_frozen_broker_exits_within_the_stop_timeout(
        broker: EmbeddedBroker, tmp_path: Path, daemons: list[Daemon]) -> None:
    """The loop is inside librdkafka (a commit waiting on a frozen broker), where no signal handler of
    its thread can run: SIGTERM still ends the process once the broker is seen silent (3 s), naming
    the step, long before worker.stop_timeout."""
    daemon = Daemon(tmp_path, broker.bootstrap, flow="gated", kafka='transaction_timeout = "60s"',
                    extra='\n[worker]\nstop_timeout = "60s"\n')
    daemons.append(daemon)
    _freeze_during_publish(daemon, broker)
    try:
        time.sleep(1.0)  # the epoch is being published into the freeze
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.exit_code(timeout=30) == 1, daemon.log  # the stop timeout, 60 s, was not waited out
    finally:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGCONT)
    assert re.search(r"ddflow run: stopping while the broker at \S+ does not answer .* exiting while epoch \[",
                     daemon.log), daemon.log
    assert "publishing" in daemon.log and "Traceback" not in daemon.log
