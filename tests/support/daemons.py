"""``ddflow run`` as the tests run it: a subprocess whose output a thread collects, and the helpers
that feed it updates and read its results from the real broker.

The root conftest loads this module as a plugin, so every test may ask for the fixtures
``daemons`` (a list: each daemon appended to it is killed at the test's end, if still running) and
``own_broker`` (a tansu broker of the test's own, to restart or freeze with SIGSTOP); the rest is
imported by name (``from support.daemons import Daemon, send, view_at``).
"""

from __future__ import annotations

import contextlib
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

from support.broker import FETCH_WAIT_MS

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

DDFLOW = str(Path(sys.executable).parent / "ddflow")
MS = 1_000_000


def module_env(module_dir: Path, **variables: str) -> dict[str, str]:
    """The test's environment for a daemon whose dataflow module the test wrote into ``module_dir``
    (put on its PYTHONPATH), with ``variables`` added, and none of the ``DDFLOW_`` and ``KAFKA_``
    variables a caller may have set (the config says everything)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_"))}
    return {**env, "PYTHONPATH": str(module_dir), **variables}


def free_port() -> int:
    """A loopback port no socket holds now (another process may take it before it is used)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port held for the block, bound but never listening: a connection there is refused,
    and no other process (another test's broker) can listen there meanwhile, as it could at a
    :func:`free_port`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def one_input_config(path: Path, bootstrap: str, function: str, source: str, out: str, dead: str, *,
                     dataflow: str = "", sections: str = "") -> Path:
    """Write the config of a daemon with one input ``a`` (fields ``k``, ``v``) on topic ``source``,
    one output ``out``, the dead-letter topic ``dead`` and metrics on a free port, running
    ``function`` (``module:name``) with ``dataflow`` lines added to its table and ``sections``
    (more TOML tables) at the end; returns ``path``."""
    path.write_text(f"""
[dataflow]
function = "{function}"
{dataflow}
[kafka]
bootstrap = "{bootstrap}"
group_id = "{source}"

[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

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
{sections}""")
    return path


class Daemon:
    """``ddflow run --config CONFIG [ARGS]`` in a subprocess, stdout and stderr collected by a thread.

    ``env``: the subprocess's environment (the test's own when None). ``port``: the metrics port,
    for :meth:`get`, when the config (or an argument) fixes it; otherwise :meth:`get` takes the
    address the daemon logs. ``start=False`` leaves the start to :meth:`start`."""

    def __init__(self, config: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None,
                 start: bool = True) -> None:
        self.config, self.env, self.port = config, env, port
        self.lines: list[str] = []
        if start:
            self.start(*args)

    def start(self, *args: str) -> None:
        """Start the process (again, for a restart; the log goes on in the same lines)."""
        self.process = subprocess.Popen([DDFLOW, "run", "--config", str(self.config), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=self.env)
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()

    def _read(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        """The first match of ``pattern`` in the log, once it is there; fails naming the pattern when
        the process exits or ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while (match := re.search(pattern, self.log)) is None:
            exited = self.process.poll() is not None
            assert not exited and time.monotonic() < deadline, \
                f"no {pattern!r} in the daemon's log ({'it exited' if exited else f'{timeout} s'}):\n{self.log}"
            time.sleep(0.05)
        return match

    def wait_for_file(self, path: Path, timeout: float = 120) -> None:
        """Return once ``path`` exists (a gate file the daemon's dataflow writes); fail when the
        process exits or ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline and self.process.poll() is None, f"no {path.name}:\n{self.log}"
            time.sleep(0.05)

    def until(self, condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
        """Return once ``condition()`` holds; fail saying ``what`` did not happen within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{self.log}"
            time.sleep(0.05)

    @property
    def url(self) -> str:
        """The daemon's endpoints: the fixed port's, else the address it logs once it serves."""
        if self.port is not None:
            return f"http://127.0.0.1:{self.port}"
        return self.wait_for(r"metrics on (http://[\d.]+:\d+)/metrics").group(1)

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of an HTTP GET of ``path`` on the daemon's endpoints."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def exit_code(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within {timeout} s:\n{self.log}") from None

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, then the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.exit_code(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def terminate(processes: list[subprocess.Popen], timeout: float = 90) -> list[int | None]:
    """SIGTERM every process still running, then each one's exit code (None: it did not exit within
    ``timeout`` seconds and was killed)."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for p in processes:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(None)
    return codes


def send(topic: str, options: dict, records: list[tuple], t: int) -> None:
    """Insert ``records`` at time ``t`` and promise nothing more before ``t + 1 ms``."""
    with UpdateProducer(topic, options) as producer:
        for record in records:
            producer.insert(record, t)
        producer.advance_to(t + MS)


def view_at(topic: str, options: dict, frontier: int, timeout: float = 120, log: Callable[[], str] = str) -> dict:
    """The result topic's view once its frontier reaches ``frontier`` (``log()`` says why not)."""
    with ResultClient(topic, options) as client:
        assert client.wait_for(frontier, timeout=timeout), log()
        return dict(client.view)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Daemons the test starts; each still running at its end is killed."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.kill()


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A broker of this test's own, on a port of its own (the test may restart it there, or freeze it)."""
    started = EmbeddedBroker(port=free_port(), use_environment=False).start()
    try:
        yield started
    finally:
        if started.pid is not None:
            os.kill(started.pid, signal.SIGCONT)  # a frozen broker must be able to stop
        started.stop()
