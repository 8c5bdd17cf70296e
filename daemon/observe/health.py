"""The daemon's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz`` (alive), ``/readyz`` (ready).

``/healthz`` answers 200 while the worker loop is alive and 503 once it has died, so a supervisor
restarts the process; ``/readyz`` answers 200 once the worker has its partitions assigned and has
completed its first epoch, 503 with the reason before that, so a load balancer or rollout waits.
``/metrics`` renders the registry passed in, honouring the scraper's ``Accept`` header
(text or OpenMetrics). The server runs in a daemon thread and binds at construction, so port 0
yields a real, known address (``EndpointServer.url``).

The server is bounded, so that no client can reach the worker through it, and the probes are
served first, so that no client can make them fail. One thread accepts connections and reads
their requests without blocking: a half-sent request (a slowloris client) holds a buffer of at
most 16 KiB and no thread, and at most ``max_connections`` of them are kept: one more evicts the
oldest (it had the longest to finish). A complete ``/healthz`` or ``/readyz`` request is answered
at once by that thread (a probe reads a few attributes, and its short answer fits the socket's
buffer); ``/metrics`` and the rest get a thread each, at most ``max_connections`` at once, and a
request beyond that is answered 503 and closed. Every connection is cut ``request_timeout``
seconds after it was accepted, however slowly its client sends or reads. So the endpoints hold at
most ``2 * max_connections`` sockets and ``max_connections`` threads whatever the clients do, and
a probe is answered 200 while hundreds of slow connections are held open.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from types import TracebackType
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .health_server import ProbeFirstServer

__all__ = ["EndpointServer", "Probe"]

log = logging.getLogger(__name__)

# A probe answers (ok, reason); the reason is the response body.
Probe = Callable[[], tuple[bool, str]]


def _always_alive() -> tuple[bool, str]:
    return True, "alive"


def _never_ready() -> tuple[bool, str]:
    return False, "not started"


class EndpointServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` until ``close()``.

    ``max_connections``: requests served in threads at once (more are answered 503 and closed),
    and half-sent requests held (one more evicts the oldest); probes are answered regardless;
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
            self._server = ProbeFirstServer((host, port), handler, max_connections=max_connections,
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
    def pending(self) -> int:
        """Connections whose request is not complete yet (at most ``max_connections``)."""
        return self._server.pending

    @property
    def evicted(self) -> int:
        """Half-sent requests closed to make room for newer connections."""
        return self._server.evicted

    @property
    def probes(self) -> int:
        """Probes (``/healthz``, ``/readyz``) answered without a thread of their own."""
        return self._server.probes

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
    """Answers one request whose bytes the server has read already (``data``), on ``request``."""

    endpoints: EndpointServer
    server_version = "ddflow"

    def __init__(self, request: socket.socket, client_address: Any, server: Any, data: bytes) -> None:
        self._data = data
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(self._data)
        self.wfile = _SocketWriter(self.request)

    def finish(self) -> None:
        pass

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
            self.handle_one_request()
        except OSError as exc:  # a client cut at its deadline, or gone: nothing to answer
            log.debug("http %s: connection ended: %s", self.client_address[0], exc)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (signature of the base class)
        log.debug("http %s - " + format, self.address_string(), *args)


class _SocketWriter(io.RawIOBase):
    """A write-only file over a socket: every write is sent whole (a probe's short answer fits the
    socket's buffer, so it is sent at once even on a non-blocking socket)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        return len(b)
