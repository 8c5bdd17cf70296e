"""The daemon's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz`` (alive), ``/readyz`` (ready).

``/healthz`` answers 200 while the worker loop is alive and 503 once it has died, so a supervisor
restarts the process; ``/readyz`` answers 200 once the worker has its partitions assigned and has
completed its first epoch, 503 with the reason before that, so a load balancer or rollout waits.
``/metrics`` renders the registry passed in, honouring the scraper's ``Accept`` header
(text or OpenMetrics). The server runs in a daemon thread and binds at construction, so port 0
yields a real, known address (``EndpointServer.url``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class EndpointServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` until ``close()``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        alive: Probe = _always_alive,
        ready: Probe = _never_ready,
    ) -> None:
        self.registry = registry
        self.alive = alive
        self.ready = ready
        handler = type("_BoundHandler", (_Handler,), {"endpoints": self})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}") from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ddflow-http", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

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

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (signature of the base class)
        log.debug("http %s - " + format, self.address_string(), *args)
