"""Signal handling shared by the commands and the demo."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["on_signals"]


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
