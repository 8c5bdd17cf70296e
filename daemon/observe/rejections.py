"""Dead letters said in the log: what the dead-letter topic receives, without a line per message.

The first dead letter of each reason is a WARNING at once, naming the input, the message's
``topic[partition] offset`` and what was wrong. After that, each reason gets at most one line per
``interval`` (a minute by default): how many more messages were dead-lettered for it since its last
line, and where the first of them was. Counts not yet said are said by `RejectionLog.tick` once
their interval passed (the worker's loop calls it) or by `RejectionLog.close`. So a flood of bad
input costs a few lines a minute, and a single bad message is never silent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RejectionLog"]

log = logging.getLogger("ddflow.daemon.deadletters")


@dataclass
class _Pending:
    count: int
    where: str  # the first unsaid message's input and position
    detail: str


class RejectionLog:
    """Rate-limited WARNING lines per dead-letter reason (see the module docstring); ``clock``:
    seconds, monotonic (a test passes its own)."""

    def __init__(self, topic: str, *, interval: float = 60.0, logger: logging.Logger = log,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.interval = interval
        self._log = logger
        self._clock = clock
        self._said: dict[str, float] = {}  # reason -> when its last line was said
        self._pending: dict[str, _Pending] = {}

    def record(self, *, input: str, topic: str, partition: int, offset: int, counts: Mapping[str, int],
               details: Mapping[str, str], where: str | None = None) -> None:
        """One dead-lettered message with ``counts`` bad updates per reason (``where``: what to name
        instead of the input's position, for a record that comes from no one message)."""
        now = self._clock()
        where = where or f"input {input!r} {topic}[{partition}] offset {offset}"
        for reason, n in counts.items():
            if reason not in self._said:
                self._said[reason] = now
                self._log.warning("dead letter (%s): %s: %s; written to %r (further ones are counted each %g s)",
                                  reason, where, details.get(reason, ""), self.topic, self.interval)
                continue
            pending = self._pending.get(reason)
            if pending is None:
                self._pending[reason] = _Pending(1, where, details.get(reason, ""))
            else:
                pending.count += 1
        self.tick(now)

    def tick(self, now: float | None = None) -> None:
        """Say the counts whose reason's interval has passed."""
        if not self._pending:
            return
        now = self._clock() if now is None else now
        for reason in [r for r in self._pending if now - self._said[r] >= self.interval]:
            self._say(reason, now)

    def close(self) -> None:
        """Say every count not said yet."""
        now = self._clock()
        for reason in list(self._pending):
            self._say(reason, now)

    def _say(self, reason: str, now: float) -> None:
        pending = self._pending.pop(reason)
        self._log.warning("dead letters (%s): %d more messages in the last %.0f s, the first %s: %s",
                          reason, pending.count, now - self._said[reason], pending.where, pending.detail)
        self._said[reason] = now
