"""Signal handling shared by the commands and the demo, and `stop_on_signals` for a worker run alone."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

__all__ = ["on_signals", "stop_on_signals"]

log = logging.getLogger("ddflow.daemon.worker")


class on_signals:
    """Call ``handler`` on SIGTERM and SIGINT while inside the block (main thread only)."""

    def __init__(self, handler: Callable[[], None]) -> None:
        self.handler = handler
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> on_signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, lambda *_: self.handler())
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


def stop_on_signals(worker: Any, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> Callable[[], None]:
    """Make ``signals`` call ``worker.stop()`` (a `ddflow.daemon.worker.Worker`); returns a function
    restoring the old handlers."""
    previous = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("received signal %s: finishing the current epoch", signum)
        worker.stop()

    for sig in signals:
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
