"""The commit window: epochs published since the last commit, made durable together.

Short epochs must not pay a commit each (a Kafka transaction costs broker round trips whatever
its size). A sink adds every epoch it publishes to its window and commits the window (outputs,
progress markers, dead letters and the consumed input offsets of all its epochs, at once) when
``commit_interval`` seconds have passed since the window's first epoch, when the worker stops, and
before a checkpoint is written. Like Kafka Streams' ``commit.interval.ms`` under exactly-once: an
epoch's output is final when the commit holding it lands, never before, and a crash before that
loses nothing (the input offsets were not committed either, so the epochs are computed again).
An interval of 0 commits every epoch on its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .exceptions import OptionsError

__all__ = ["CommitWindow"]


class CommitWindow:
    """What a sink published and has not committed yet: ``items`` (whatever the sink commits per
    epoch, in order), the range ``[lower, upper)`` they cover and the newest input ``offsets``."""

    def __init__(self, interval: float) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval >= 0:
            raise OptionsError(f"commit_interval: expected seconds >= 0, got {interval!r}")
        self.interval = float(interval)
        self.items: list[Any] = []
        self.offsets: dict[tuple[str, int], int] = {}
        self.lower: int | None = None
        self.upper: int | None = None
        self.epochs = 0
        self._since: float | None = None

    def add(self, lower: int, upper: int | None, items: list[Any], offsets: Mapping[tuple[str, int], int] | None) -> None:
        """One more epoch ``[lower, upper)``, its ``items`` and the input offsets consumed up to it."""
        if self._since is None:
            self._since = time.monotonic()
            self.lower = lower
        self.items.extend(items)
        self.offsets.update(offsets or {})
        self.upper = upper
        self.epochs += 1

    def age(self) -> float:
        """Seconds since the window's first epoch (0 when empty)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def due(self) -> bool:
        """Whether the window holds epochs and its interval has passed."""
        return self.epochs > 0 and self.age() >= self.interval

    def clear(self) -> None:
        """Forget the window (its commit landed)."""
        self.items = []
        self.offsets = {}
        self.lower = self.upper = None
        self.epochs = 0
        self._since = None

    def describe(self) -> str:
        """The epochs of the window, for messages: ``epoch [l, u)`` or ``epochs [l, u) (n)``."""
        if self.epochs == 1:
            return f"epoch [{self.lower}, {self.upper})"
        return f"epochs [{self.lower}, {self.upper}) ({self.epochs})"
