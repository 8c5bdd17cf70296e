"""Partition floors: where the worker's frontier passed a partition, durable so a replay agrees.

An update is late when its time is behind its partition's frontier: what the partition's earlier
messages promised, a deterministic function of the offsets read. A partition that does not hold
the worker's frontier back (an idle one under ``monotonic``) is the exception: when an epoch
closes beyond its frontier, the worker raises that partition's frontier to the epoch's upper
bound, a decision made by wall-clock time that a replay cannot make again. A *floor*
``(partition, offset, time)`` records it: "before reading ``offset`` of ``partition``, its
frontier was at least ``time``". The worker appends new floors to a log and fsyncs it before
publishing the epoch (as it does the reclock bindings), so every published output depends only
on durable floors, and a replay applies each floor when its read position reaches the offset.

The log is one JSON object per line: ``{"since": {p: offset}}`` first (the oldest kept
checkpoint's offsets: a restore resumes at or beyond them, with the floors below them already
in its recorded partition frontiers, so those were dropped), then ``{"p": p, "o": offset, "t":
time}``. A torn last line (a crash while appending) is ignored: nothing was published from it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping
from pathlib import Path

from ..durable import append_json_lines, read_json_lines, replace_json_lines

__all__ = ["FloorLog"]


class FloorLog:
    """The floors of one input topic, in memory and in the log at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.since: dict[int, int] = {}
        self._floors: dict[int, dict[int, int]] = {}  # partition -> offset -> time (the largest)
        self._index: dict[int, tuple[list[int], list[int]]] = {}  # partition -> (offsets, running max)
        self._unsaved: list[tuple[int, int, int]] = []
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        if read_json_lines(self.path, "partition floors", self._apply):
            self._rewrite()  # drop the torn line so later appends start on a fresh line

    def _apply(self, number: int, obj: dict) -> None:
        if number == 1 and "since" in obj:
            self.since = {int(p): int(o) for p, o in obj["since"].items()}
        else:
            self._add(int(obj["p"]), int(obj["o"]), int(obj["t"]))

    def _add(self, partition: int, offset: int, time: int) -> bool:
        floors = self._floors.setdefault(partition, {})
        if floors.get(offset, time - 1) >= time:
            return False
        floors[offset] = time
        self._index.pop(partition, None)
        return True

    def record(self, partition: int, offset: int, time: int) -> None:
        """Before reading ``offset`` of ``partition`` its frontier is at least ``time`` (kept in
        memory until `persist`)."""
        if self._add(partition, offset, time):
            self._unsaved.append((partition, offset, time))

    def floor(self, partition: int, offset: int) -> int | None:
        """The largest time recorded for ``partition`` at an offset ``<= offset`` (None: none)."""
        index = self._index.get(partition)
        if index is None:
            floors = self._floors.get(partition)
            if not floors:
                return None
            offsets = sorted(floors)
            running, best = [], None
            for o in offsets:
                best = floors[o] if best is None else max(best, floors[o])
                running.append(best)
            index = self._index[partition] = (offsets, running)
        offsets, running = index
        i = bisect.bisect_right(offsets, offset)
        return running[i - 1] if i else None

    def persist(self) -> None:
        """Append the floors recorded since the last call and fsync (before publishing)."""
        if not self._unsaved:
            return
        append_json_lines(self.path, self._header(), ({"p": p, "o": o, "t": t} for p, o, t in self._unsaved))
        self._unsaved = []

    def compact(self, since: Mapping[int, int]) -> int:
        """Drop the floors below ``since`` (the oldest kept checkpoint's offsets, whose recorded
        partition frontiers include them), keeping per partition only the largest floor at each
        offset. Returns how many were dropped."""
        self.persist()
        raised = {**self.since, **{p: max(o, self.since.get(p, 0)) for p, o in since.items()}}
        dropped = 0
        for p, floors in self._floors.items():
            below = [o for o in floors if o < raised.get(p, 0)]
            for o in below:
                del floors[o]
            dropped += len(below)
            if below:
                self._index.pop(p, None)
        if raised == self.since and not dropped and self.path.exists():
            return 0
        self.since = raised
        self._rewrite()
        return dropped

    def check_start(self, partition: int, offset: int) -> str | None:
        """A warning when a replay of ``partition`` from ``offset`` lacks dropped floors."""
        since = self.since.get(partition, 0)
        if offset < since:
            return (f"partition {partition}: replaying from offset {offset}, but the partition floors below offset "
                    f"{since} were dropped with older checkpoints ({self.path}); an update that arrived behind an idle "
                    "partition's frontier there may be classified differently than when it was published")
        return None

    def _header(self) -> dict:
        return {"since": {str(p): o for p, o in self.since.items()}}

    def _rewrite(self) -> None:
        floors = ({"p": p, "o": o, "t": t} for p in sorted(self._floors) for o, t in sorted(self._floors[p].items()))
        replace_json_lines(self.path, [self._header(), *floors])
        self._unsaved = []

    def __len__(self) -> int:
        return sum(len(f) for f in self._floors.values())
