"""Where the command line's log lines go and how they read: plain text, or one JSON object per line.

``--log-format text`` (the default) writes ``2026-11-26 09:00:00,123 INFO ddflow.daemon: message``
lines. ``--log-format json`` (env ``DDFLOW_LOG_FORMAT``) writes every line on stderr as one JSON
object, for log pipelines that parse rather than grep::

    {"time": "2026-11-26T09:00:00.123Z", "level": "INFO", "logger": "ddflow.daemon", "message": "..."}

with ``exception`` (the formatted traceback) when the line carries one. A caller may assume that
in JSON mode every line the process writes on stderr parses as such an object: the command's own
final message (``ddflow run: ...``), an uncaught exception (any thread), a Python warning and the
kernel compiler's progress all go through logging; librdkafka's lines already do
(:mod:`ddflow.daemon.kafka.logs`).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["FORMATS", "JsonFormatter", "configure", "is_json", "report", "progress"]

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log = logging.getLogger("ddflow")
_json = False


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: ``time`` (UTC, ISO 8601, milliseconds), ``level``, ``logger``,
    ``message`` (its arguments applied), and ``exception`` / ``stack`` when it has them."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(level: str, fmt: str = "text") -> None:
    """Send the root logger's lines to stderr at ``level`` in ``fmt`` (one of `FORMATS`); in JSON mode
    also route warnings and uncaught exceptions (main thread and others) through logging. Like
    ``logging.basicConfig``, it leaves a root logger that already has handlers as it is."""
    global _json
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    _json = fmt == "json"
    if _json:
        logging.captureWarnings(True)
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread


def is_json() -> bool:
    """Whether `configure` chose JSON lines."""
    return _json


def report(text: str, exc: BaseException | None = None) -> None:
    """The command's final word (``ddflow run: ...``) on stderr: printed as it is in text mode, an
    ERROR line with ``exc``'s traceback as its ``exception`` in JSON mode."""
    if _json:
        log.error("%s", text, exc_info=exc)
    else:
        print(text, file=sys.stderr, flush=True)


def progress(prefix: str) -> Callable[[int, int, str], None]:
    """A kernel compiler's ``progress`` that logs ``prefix: done/total name`` lines at INFO."""
    started = time.perf_counter()

    def say(done: int, total: int, name: str) -> None:
        if done == 0:
            log.info("%s: 0/%d (once per kernel cache; later starts load them)", prefix, total)
        else:
            log.info("%s: %d/%d %s (%.1f s)", prefix, done, total, name, time.perf_counter() - started)

    return say


def _uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    log.critical("uncaught %s: %s", kind.__name__, exc, exc_info=(kind, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    log.critical("uncaught %s in thread %s: %s", args.exc_type.__name__, name, args.exc_value,
                 exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
