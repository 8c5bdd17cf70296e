"""The daemon's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz`` (alive), ``/readyz`` (ready).

``/healthz`` answers 200 while the worker loop is alive and 503 once it has died, so a supervisor
restarts the process; ``/readyz`` answers 200 once the worker has its partitions assigned and has
completed its first epoch, 503 with the reason before that, so a load balancer or rollout waits.
``/metrics`` renders the registry passed in, honouring the scraper's ``Accept`` header
(text or OpenMetrics). The server runs in a daemon thread and binds at construction, so port 0
yields a real, known address (``EndpointServer.url``).

The server is bounded, so that no client can reach the worker through it: at most
``max_connections`` requests are served at once (one thread and one file descriptor each); a
connection beyond that is answered 503 and closed at once, and every connection is cut
``request_timeout`` seconds after it was accepted, however slowly its client sends (half-sent
requests, idle keep-alives). Resources held by the endpoints are therefore at most
``max_connections`` threads and sockets, whatever the clients do.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from types import TracebackType
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["EndpointServer", "Probe"]

log = logging.getLogger(__name__)

# A probe answers (ok, reason); the reason is the response body.
Probe = Callable[[], tuple[bool, str]]


def _always_alive() -> tuple[bool, str]:
    return True, "alive"


def _never_ready() -> tuple[bool, str]:
    return False, "not started"


_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server with a cap on concurrent connections and a deadline per connection."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of connections is accepted, then refused at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int, request_timeout: float) -> None:
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.refused = 0  # connections answered 503 because every slot was taken
        self.cut = 0  # times a connection past its deadline was shut down
        self.served = 0  # connections given a slot
        self.peak = 0  # the most connections served at once
        self._slots = threading.BoundedSemaphore(max_connections)
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        super().__init__(address, handler)

    @property
    def connections(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._deadlines)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._lock:
            self._deadlines[request] = time.monotonic() + self.request_timeout
            self.served += 1
            self.peak = max(self.peak, len(self._deadlines))
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._lock:
            if self._deadlines.pop(request, None) is None:
                return
        self._slots.release()

    def service_actions(self) -> None:
        """Cut connections past their deadline (serve_forever calls this every poll interval)."""
        now = time.monotonic()
        with self._lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
        for sock in late:
            self.cut += 1
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the handler's read or write fails and its thread ends
            except OSError:
                pass


class EndpointServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` until ``close()``.

    ``max_connections``: requests served at once (more are answered 503 and closed);
    ``request_timeout``: seconds a connection may last from accept to the end of its response.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        alive: Probe = _always_alive,
        ready: Probe = _never_ready,
        max_connections: int = 16,
        request_timeout: float = 10.0,
    ) -> None:
        if type(max_connections) is not int or max_connections <= 0:
            raise ValueError(f"EndpointServer max_connections: expected a positive int, got {max_connections!r}")
        if not request_timeout > 0:
            raise ValueError(f"EndpointServer request_timeout: expected seconds > 0, got {request_timeout!r}")
        self.registry = registry
        self.alive = alive
        self.ready = ready
        # the socket timeout bounds each read and write; the server's deadline bounds the whole request
        handler = type("_BoundHandler", (_Handler,), {"endpoints": self, "timeout": request_timeout})
        try:
            self._server = _BoundedServer((host, port), handler, max_connections=max_connections,
                                          request_timeout=request_timeout)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="ddflow-http", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Connections being served now (at most ``max_connections``)."""
        return self._server.connections

    @property
    def refused(self) -> int:
        """Connections answered 503 because ``max_connections`` were being served."""
        return self._server.refused

    @property
    def served(self) -> int:
        """Connections given a slot so far (each accepted connection is either served or refused)."""
        return self._server.served

    @property
    def peak_connections(self) -> int:
        """The most connections served at once so far (never above ``max_connections``)."""
        return self._server.peak

    @property
    def url(self) -> str:
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> EndpointServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    endpoints: EndpointServer
    server_version = "ddflow"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._respond(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(body=False)

    def _respond(self, *, body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                payload = encoder(self.endpoints.registry)
            except Exception:
                log.exception("rendering /metrics failed")
                self._send(500, b"metrics rendering failed\n", "text/plain; charset=utf-8", body)
                return
            self._send(200, payload, content_type, body)
        elif path in ("/healthz", "/readyz"):
            probe = self.endpoints.alive if path == "/healthz" else self.endpoints.ready
            try:
                ok, reason = probe()
            except Exception as exc:  # a probe that raises is a failing probe, with its reason
                ok, reason = False, f"probe raised {type(exc).__name__}: {exc}"
            self._send(200 if ok else 503, f"{reason}\n".encode(), "text/plain; charset=utf-8", body)
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain; charset=utf-8", body)

    def _send(self, status: int, payload: bytes, content_type: str, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError as exc:  # a client cut at its deadline, or gone: nothing to answer
            log.debug("http %s: connection ended: %s", self.client_address[0], exc)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (signature of the base class)
        log.debug("http %s - " + format, self.address_string(), *args)
