"""kcat, a Kafka client nobody here wrote, for tests that drive the daemon from outside.

`ensure_kcat` finds Debian's ``kcat`` or installs it with apt-get (as root, as CI runs), and
skips the test with the reason only when it cannot be installed. `kcat_broker` gives a broker
kcat can talk to: with ``KAFKA_BOOTSTRAP`` that broker; otherwise a private tansu behind
`ApiVersionsProxy`. Debian 12's kcat links librdkafka 2.0.2, which fails on the tagged fields
tansu writes at the end of its ApiVersions v3 answer (SupportedFeatures, FinalizedFeaturesEpoch,
FinalizedFeatures, ZkMigrationReady, written even at their default values): "ApiVersionRequest
failed: Local: Read underflow". librdkafka 2.16 (the one confluent-kafka bundles) reads them, and
the proxy rewrites that one answer without those optional fields, passing every other byte
through, so kcat runs unmodified on its own librdkafka.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from support.locks import machine_lock

from ddflow.daemon.kafka.broker import EmbeddedBroker

API_VERSIONS = 18


def ensure_kcat() -> str:
    """The path of ``kcat``, installed with apt-get when missing; skips the test if impossible."""
    with machine_lock("kcat"):  # one of the suite's processes installs it, the others wait and find it
        return _find_or_install_kcat()


def _find_or_install_kcat() -> str:
    found = shutil.which("kcat")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("kcat is not installed and cannot be installed here (needs apt-get and root): "
                    "apt-get install kcat")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    for command in ([apt, *lock, "update"], [apt, *lock, "install", "-y", "--no-install-recommends", "kcat"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            pytest.skip(f"kcat is not installed and `{' '.join(command)}` failed: {' | '.join(tail)}")
    found = shutil.which("kcat")
    if not found:
        pytest.skip("apt-get installed kcat but it is not on PATH")
    return found


def _uvarint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _skip_tags(data: bytes, i: int) -> int:
    count, i = _uvarint(data, i)
    for _ in range(count):
        _, i = _uvarint(data, i)
        size, i = _uvarint(data, i)
        i += size
    return i


def without_top_level_tags(response: bytes) -> bytes:
    """An ApiVersions v3+ response (correlation id onwards) with no top-level tagged fields."""
    i = 4 + 2  # correlation id, error code
    count, i = _uvarint(response, i)
    for _ in range(count - 1):  # compact array: count + 1
        i = _skip_tags(response, i + 6)  # api key, min and max version, the entry's tags
    i += 4  # throttle time
    return response[:i] + b"\x00"


class ApiVersionsProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target``, rewriting ApiVersions v3+ answers
    with `without_top_level_tags`; everything else passes unchanged. Threads; use as a context
    manager."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()

    def __enter__(self) -> ApiVersionsProxy:
        threading.Thread(target=self._accept, daemon=True, name="kcat-proxy").start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed.set()
        self._server.close()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the broker is not listening yet: the client retries
                client.close()
                continue
            self._sockets += [client, broker]
            asked: set[int] = set()
            lock = threading.Lock()
            threading.Thread(target=self._pump, args=(client, broker, asked, lock, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(broker, client, asked, lock, True), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, asked: set[int], lock: threading.Lock, answers: bool) -> None:
        pending = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                pending += data
                out = b""
                while len(pending) >= 4:
                    size = struct.unpack(">i", pending[:4])[0]
                    if len(pending) < 4 + size:
                        break
                    frame, pending = pending[4 : 4 + size], pending[4 + size :]
                    if not answers:  # a request: api key, api version, correlation id
                        key, version, correlation = struct.unpack(">hhi", frame[:8])
                        if key == API_VERSIONS and version >= 3:
                            with lock:
                                asked.add(correlation)
                    else:
                        correlation = struct.unpack(">i", frame[:4])[0]
                        with lock:
                            hit = correlation in asked
                            asked.discard(correlation)
                        if hit:
                            frame = without_top_level_tags(frame)
                    out += struct.pack(">i", len(frame)) + frame
                if out:
                    dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@pytest.fixture(scope="module")
def kcat_broker() -> Iterator[str]:
    """The bootstrap address of a broker that both kcat and ddflow can use."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ApiVersionsProxy(port) as proxy, EmbeddedBroker(port=port, advertised_port=proxy.port,
                                                         use_environment=False) as broker:
        yield broker.bootstrap


def kcat(bootstrap: str, *args: str, input: str | None = None, timeout: float = 60) -> str:
    """Run ``kcat -b BOOTSTRAP ARGS`` (stdin ``input``); its stdout, or AssertionError with stderr."""
    done = subprocess.run([ensure_kcat(), "-b", bootstrap, *args], input=input, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def kcat_read(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every committed message of ``topic`` as kcat's JSON envelopes (-J: topic, partition,
    offset, key, payload, headers as [name, value, ...])."""
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q",
               "-X", "isolation.level=read_committed")
    return [json.loads(line) for line in out.splitlines() if line.strip()]
