"""Reclock bindings: which input offsets got which arrival time, durable before outputs depend on them.

Under the ``reclock`` policy the daemon assigns data times on arrival, so a replay after a crash
would assign new times and publish outputs the result topic already holds at the old ones. As in
Materialize's remap collection, each assignment is a *binding* ``(time, {partition: upper})``:
the messages of ``partition`` from the previous binding's upper up to ``upper`` (exclusive) got
``time``. The worker appends an epoch's bindings to a log and fsyncs it before publishing the
epoch, so every published output depends only on durable bindings; a replay looks each message's
(partition, offset) up and assigns the same time, and holds the input's frontier at the next
bound time until the bound offsets are read again. Offsets beyond the last binding get fresh
times (no output depended on them).

The log is one JSON object per line: ``{"floor": {p: offset}}`` first (the oldest kept
checkpoint's offsets: no restore resumes below them, and bindings entirely below them were
dropped), then ``{"time": t, "upper": {p: o}}``.
A torn last line (a crash while appending) is ignored: nothing was published from it.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping
from pathlib import Path

from ..durable import append_json_lines, read_json_lines, replace_json_lines
from ..exceptions import RecoveryError, SnapshotError

__all__ = ["ReclockBindings"]


class ReclockBindings:
    """The binding log of one reclocked input topic."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.floor: dict[int, int] = {}
        self.entries: list[tuple[int, dict[int, int]]] = []
        self._uppers: dict[int, list[int]] = {}  # per partition: binding uppers, increasing
        self._times: dict[int, list[int]] = {}  # per partition: the time of each of those bindings
        self._unsaved = 0
        self.last_time: int | None = None
        if self.path.exists():
            self._load()

    # -- the log -------------------------------------------------------------------------------

    def _load(self) -> None:
        torn = read_json_lines(self.path, "reclock bindings", self._apply)
        self._unsaved = 0
        if torn:
            self._rewrite()  # drop the torn line so later appends start on a fresh line

    def _apply(self, number: int, obj: dict) -> None:
        if number == 1 and "floor" in obj:
            self.floor = {int(p): int(o) for p, o in obj["floor"].items()}
        else:
            self._add(int(obj["time"]), {int(p): int(o) for p, o in obj["upper"].items()})

    def _add(self, time: int, upper: Mapping[int, int]) -> None:
        for p, o in upper.items():
            uppers = self._uppers.setdefault(p, [])
            if uppers and o <= uppers[-1]:
                raise SnapshotError(f"reclock bindings {self.path}: partition {p} upper {o} does not grow "
                                    f"(previous {uppers[-1]})")
            uppers.append(o)
            self._times.setdefault(p, []).append(time)
        self.entries.append((time, dict(upper)))
        self.last_time = time if self.last_time is None else max(self.last_time, time)
        self._unsaved += 1

    def bind(self, time: int, upper: Mapping[int, int]) -> None:
        """Record that messages up to ``upper[p]`` (exclusive) on each partition got ``time``
        (kept in memory until `persist`)."""
        if upper:
            self._add(time, upper)

    def persist(self) -> None:
        """Append the bindings recorded since the last call and fsync (before publishing)."""
        if not self._unsaved:
            return
        new = self.entries[len(self.entries) - self._unsaved:]
        append_json_lines(self.path, self._header(), map(_binding, new))
        self._unsaved = 0

    def compact(self, floor: Mapping[int, int]) -> int:
        """Raise the floor to ``floor`` (the oldest kept checkpoint's offsets: no restore resumes
        below them) and drop the bindings entirely below it. Returns how many were dropped."""
        self.persist()
        raised = {**self.floor, **{p: max(o, self.floor.get(p, 0)) for p, o in floor.items()}}
        keep = [(time, upper) for time, upper in self.entries
                if any(o > raised.get(p, 0) for p, o in upper.items())]
        dropped = len(self.entries) - len(keep)
        if raised == self.floor and not dropped:
            return 0
        self.floor = raised  # recorded even when nothing was dropped: the log says where it holds
        if dropped:
            self.entries, self._uppers, self._times, self.last_time = [], {}, {}, None
            for time, upper in keep:
                self._add(time, upper)
        self._rewrite()
        return dropped

    def _header(self) -> dict:
        return {"floor": {str(p): o for p, o in self.floor.items()}}

    def _rewrite(self) -> None:
        # the directory is made if missing: a floor may come before any binding
        replace_json_lines(self.path, [self._header(), *map(_binding, self.entries)])
        self._unsaved = 0

    # -- replay --------------------------------------------------------------------------------

    def lookup(self, partition: int, offset: int) -> int | None:
        """The time bound to the message at ``offset`` of ``partition`` (None: not bound yet)."""
        if offset < self.floor.get(partition, 0):
            raise RecoveryError(
                f"reclock: the binding of partition {partition} offset {offset} was dropped with old checkpoints "
                f"(bindings start at offset {self.floor[partition]}); its time cannot be replayed"
            )
        uppers = self._uppers.get(partition)
        if not uppers or offset >= uppers[-1]:
            return None
        return self._times[partition][bisect.bisect_right(uppers, offset)]

    def check_start(self, partition: int, offset: int, topic: str) -> None:
        """Raise if replaying ``partition`` from ``offset`` would need dropped bindings."""
        floor = self.floor.get(partition, 0)
        if offset < floor:
            raise RecoveryError(
                f"reclocked input topic {topic!r}[{partition}]: resuming at offset {offset}, but the time bindings "
                f"below offset {floor} were dropped when older checkpoints were pruned ({self.path}); replaying "
                "would give those messages new times and re-publish their outputs. Restore a checkpoint at or "
                "beyond that offset, or start over with a fresh checkpoint directory and empty result topics."
            )

    def hold(self, partition: int, next_offset: int) -> int | None:
        """The bound time of the next message to read on ``partition`` (None: past every binding)."""
        return self.lookup(partition, next_offset)

    def __len__(self) -> int:
        return len(self.entries)


def _binding(entry: tuple[int, Mapping[int, int]]) -> dict:
    """One binding as its log line holds it."""
    time, upper = entry
    return {"time": time, "upper": {str(p): o for p, o in upper.items()}}
