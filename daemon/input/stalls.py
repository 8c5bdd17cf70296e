"""What holds the output frontier back, said when it has not moved for a while though input waits.

The output frontier moves when an epoch closes, which needs the input frontier (the least frontier
of the inputs' partitions, each promised by that partition's progress markers) to pass the next
epoch boundary. When updates wait in the dataflow (``open_updates`` > 0) and the frontier has not
moved for ``after`` seconds, `StallWatch.check` names the partition holding it back and why: no
progress marker read from it yet, or its last marker promises too little to reach the next epoch
boundary (``epoch.resolution``). The reason is logged once (a WARNING), kept as ``reason`` (the
service's ``/readyz`` shows it), and cleared, with an INFO line, when the frontier moves again.

A partition can also hold messages the worker is not delivered: the broker's high watermark is
past the next offset to read, the partition is not paused, and nothing came for ``after``
seconds. A ``read_committed`` consumer stops at the first record of a transaction still open (a
producer that died in one holds it open until its ``transaction.timeout.ms``), and reports the
partition at its end meanwhile: nothing else would say why the input stands still. Each such
partition is said once (a WARNING naming it, the offset and the watermark), kept in ``unread``,
and cleared with an INFO line when its messages come.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
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
        self.unread: dict[tuple[str, int], str] = {}  # (input, partition) -> why its messages do not come
        self._reading: dict[tuple[str, int], tuple[int, float]] = {}  # -> (next offset, since when)

    def check(self, *, frontier: int, open_updates: int, stats: Any, topics: Mapping[str, str],
              resolution_ns: int | None, paused: Collection[tuple[str, int]] = ()) -> str | None:
        """The stall's reason (None: no stall), from the worker's output ``frontier``, the updates
        waiting, its `observe.stats.Stats` and its inputs' topics by name; ``paused``: the
        (topic, partition)s the source does not read for now (their messages wait by design)."""
        now = self._clock()
        self._check_unread(now, stats, topics, paused)
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

    def _check_unread(self, now: float, stats: Any, topics: Mapping[str, str],
                      paused: Collection[tuple[str, int]]) -> None:
        """Say the partitions whose messages past the next offset have not come for ``after`` s."""
        for name, s in list(stats.inputs.items()):
            topic = topics.get(name, name)
            for p, ps in list(s.partitions.items()):
                key, seen = (name, p), self._reading.get((name, p))
                moved = seen is None or seen[0] != ps.offset
                if moved and self.unread.pop(key, None) is not None:
                    log.info("input %r %s[%d]: its messages come again (next offset %d)", name, topic, p, ps.offset)
                if moved or not ps.lag or (topic, p) in paused:  # counted from when messages wait unread
                    self._reading[key] = (ps.offset, now)
                    continue
                if key not in self.unread and now - seen[1] >= self.after:
                    self.unread[key] = (
                        f"input {name!r} {topic}[{p}]: the broker's high watermark is {ps.high_watermark}, past the "
                        f"next offset {ps.offset}, but nothing was delivered for {now - seen[1]:.0f} s: a read_committed "
                        "consumer stops at the first record of a transaction still open (a producer that died in "
                        "one holds it open until its transaction.timeout.ms), or the broker is not serving it")
                    log.warning("%s", self.unread[key])

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
