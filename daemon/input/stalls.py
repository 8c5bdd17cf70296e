"""What holds the output frontier back, said when it has not moved for a while though input waits.

The output frontier moves when an epoch closes, which needs the input frontier (the least frontier
of the inputs' partitions, each promised by that partition's progress markers) to pass the next
epoch boundary. When updates wait in the dataflow (``open_updates`` > 0) and the frontier has not
moved for ``after`` seconds, `StallWatch.check` names the partition holding it back and why: no
progress marker read from it yet, or its last marker promises too little to reach the next epoch
boundary (``epoch.resolution``). The reason is logged once (a WARNING), kept as ``reason`` (the
service's ``/readyz`` shows it), and cleared, with an INFO line, when the frontier moves again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["StallWatch"]

log = logging.getLogger("ddflow.daemon.worker")

_LEAST = -(1 << 63)


class StallWatch:
    """Watches one worker's output frontier (see the module docstring); ``after``: seconds without
    a move, while updates wait, before the stall is said; ``clock``: monotonic seconds."""

    def __init__(self, after: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.after = after
        self._clock = clock
        self._frontier: int | None = None
        self._since = clock()
        self.reason: str | None = None  # why the frontier is held back, while it is

    def check(self, *, frontier: int, open_updates: int, stats: Any, topics: Mapping[str, str],
              resolution_ns: int | None) -> str | None:
        """The stall's reason (None: no stall), from the worker's output ``frontier``, the updates
        waiting, its `observe.stats.Stats` and its inputs' topics by name."""
        now = self._clock()
        if frontier != self._frontier or open_updates == 0:
            if self.reason is not None:
                log.info("the output frontier moves again (it was held back: %s)", self.reason)
            self._frontier, self._since, self.reason = frontier, now, None
            return None
        if now - self._since < self.after:
            return None
        reason = self._explain(frontier, stats, topics, resolution_ns)
        if reason != self.reason:
            log.warning("the output frontier %s has not moved for %.0f s while %d updates wait: %s", frontier,
                        now - self._since, open_updates, reason)
        self.reason = reason
        return reason

    @staticmethod
    def _explain(frontier: int, stats: Any, topics: Mapping[str, str], resolution_ns: int | None) -> str:
        held: tuple[int, str, int, Any] | None = None  # (its frontier, input, partition, its stats)
        for name, s in list(stats.inputs.items()):
            for p, ps in list(s.partitions.items()):
                if ps.idle:
                    continue
                at = _LEAST if ps.frontier is None else ps.frontier
                if held is None or at < held[0]:
                    held = (at, name, p, ps)
        if held is None:
            return "no input partition is assigned or active"
        at, name, p, ps = held
        where = f"input {name!r} {topics.get(name, name)}[{p}]"
        if at <= _LEAST:
            return f"{where} holds it back: no progress marker read from it yet (next offset {ps.offset})"
        boundary = ""
        if resolution_ns:
            boundary = (f"; the next epoch closes when every partition's markers reach "
                        f"{at - at % resolution_ns + resolution_ns} (epoch.resolution {resolution_ns} ns)")
        return (f"{where} holds it back at time {at}: its last progress marker (before offset {ps.offset}) "
                f"promises nothing later{boundary}")
