"""The HTTP server under the daemon's endpoints: probes first, everything bounded.

See `health` for what it promises. `ProbeFirstServer` accepts and reads requests in the thread
running `serve_forever`, answers ``/healthz`` and ``/readyz`` there, and serves other paths in
threads of their own, at most ``max_connections`` at once; ``handler(sock, address, server,
data)`` answers one request whose bytes ``data`` were read already, then the server closes the
socket.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

__all__ = ["ProbeFirstServer"]

log = logging.getLogger("ddflow.daemon.observe.health")

_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_TOO_LARGE = b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_MAX_REQUEST = 16 * 1024  # bytes of request line and headers a connection may send
_PROBES = (b"/healthz", b"/readyz")


class _Reading:
    """A connection whose request is not complete yet: its bytes so far and its deadline."""

    __slots__ = ("data", "deadline")

    def __init__(self, deadline: float) -> None:
        self.data = b""
        self.deadline = deadline


class ProbeFirstServer:
    """Accepts and reads requests in one thread; answers probes there, hands the rest to bounded
    threads (see the module docstring)."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int, request_timeout: float) -> None:
        self.handler = handler
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.refused = 0  # complete requests answered 503 because every thread slot was taken
        self.cut = 0  # connections shut down at their deadline
        self.evicted = 0  # half-sent requests closed to make room for a newer connection
        self.served = 0  # requests given a thread slot
        self.probes = 0  # probes answered by the accepting thread
        self.peak = 0  # the most requests served in threads at once
        self.peak_pending = 0  # the most half-sent requests held at once
        self._slots = threading.BoundedSemaphore(max_connections)
        self._deadlines: dict[socket.socket, float] = {}  # connections served in threads
        self._lock = threading.Lock()
        self._reading: dict[socket.socket, _Reading] = {}  # in accept order (the oldest first)
        self._selector = selectors.DefaultSelector()
        self._closed = threading.Event()
        self._stopped = threading.Event()
        self.socket = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector.register(self.socket, selectors.EVENT_READ)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._deadlines)

    @property
    def pending(self) -> int:
        return len(self._reading)

    def serve_forever(self, poll_interval: float = 0.25) -> None:
        try:
            while not self._closed.is_set():
                for key, _ in self._selector.select(poll_interval):
                    if key.fileobj is self.socket:
                        self._accept()
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._cut_late()
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: the backlog waits for the next round
                log.debug("http: accept failed: %s", exc)
                self._closed.wait(0.05)  # the listening socket stays readable: do not spin on it
                return
            sock.setblocking(False)
            # the newcomer goes in first and the count last, so whoever reads ``evicted`` (another
            # thread) sees the half-sent requests it left held, never a moment in between
            self._reading[sock] = _Reading(time.monotonic() + self.request_timeout)
            if len(self._reading) > self.max_connections:
                self._drop(next(iter(self._reading)))
                self.evicted += 1
            self.peak_pending = max(self.peak_pending, len(self._reading))
            self._selector.register(sock, selectors.EVENT_READ)
            self._read(sock)  # a probe's request has often arrived with its connection

    def _read(self, sock: socket.socket) -> None:
        reading = self._reading.get(sock)
        if reading is None:
            return
        try:
            chunk = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away
            self._drop(sock)
            return
        reading.data += chunk
        if b"\r\n\r\n" not in reading.data and b"\n\n" not in reading.data:
            if len(reading.data) > _MAX_REQUEST:
                self._answer_and_close(sock, _TOO_LARGE)
            return
        del self._reading[sock]
        self._selector.unregister(sock)
        target = reading.data.split(b" ", 2)[1:2]
        path = target[0].split(b"?", 1)[0] if target else b""
        if path in _PROBES:
            self.probes += 1
            self._handle(sock, reading.data, blocking=False)
        else:
            self._dispatch(sock, reading.data, reading.deadline)

    def _dispatch(self, sock: socket.socket, data: bytes, deadline: float) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self._answer_and_close(sock, _BUSY)
            return
        with self._lock:
            self._deadlines[sock] = deadline
            self.served += 1
            self.peak = max(self.peak, len(self._deadlines))
        threading.Thread(target=self._serve_thread, args=(sock, data), name="ddflow-http-request",
                         daemon=True).start()

    def _serve_thread(self, sock: socket.socket, data: bytes) -> None:
        try:
            self._handle(sock, data, blocking=True)
        finally:
            with self._lock:
                self._deadlines.pop(sock, None)
            self._slots.release()

    def _handle(self, sock: socket.socket, data: bytes, *, blocking: bool) -> None:
        """Run the handler on the request ``data`` read from ``sock``, then close it."""
        try:
            if blocking:
                sock.settimeout(self.request_timeout)
            try:
                peer = sock.getpeername()
            except OSError:
                peer = ("?", 0)
            self.handler(sock, peer, self, data)  # type: ignore[call-arg]
        except OSError as exc:
            log.debug("http: connection ended: %s", exc)
        except Exception:
            log.exception("http: serving a request failed")
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _answer_and_close(self, sock: socket.socket, response: bytes) -> None:
        with contextlib.suppress(OSError):
            sock.send(response)
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        if self._reading.pop(sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def _cut_late(self) -> None:
        """Close half-sent requests past their deadline, and shut down thread-served ones past it."""
        now = time.monotonic()
        for sock in [s for s, r in self._reading.items() if r.deadline <= now]:
            self.cut += 1
            self._drop(sock)
        with self._lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
        for sock in late:
            self.cut += 1
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the handler's read or write fails and its thread ends

    def shutdown(self) -> None:
        """Stop `serve_forever` (waits for it to return)."""
        self._closed.set()
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        for sock in list(self._reading):
            self._drop(sock)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self.socket)
        self._selector.close()
        self.socket.close()
