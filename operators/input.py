"""Input sessions: where updates ``(record, time, diff)`` enter a dataflow, with the frontier promise.

``advance_to(t)`` promises that no later update has a time ``< t``; ``close()`` promises no more
updates at all. Updates are validated as they are given (time an int64 not behind the frontier, diff a
non-zero int) so bad input fails at the call that made it, with the offending value in the message.
"""

from __future__ import annotations

import numpy as np

from .batch import Updates
from .errors import DiffError, GraphError, TimeError
from .frontier import Antichain
from .graph import Node, Scope
from .lattice import T_MAX, T_MIN


def check_time(time: object, what: str = "time") -> int:
    if isinstance(time, bool) or not isinstance(time, (int, np.integer)):
        raise TimeError(f"{what} must be an int (nanoseconds), got {time!r}")
    t = int(time)
    if not T_MIN <= t <= T_MAX:
        raise TimeError(f"{what} {t} is outside int64")
    return t


def check_diff(diff: object) -> int:
    if isinstance(diff, bool) or not isinstance(diff, (int, np.integer)):
        raise DiffError(f"diff must be a non-zero int, got {diff!r}")
    if diff == 0:
        raise DiffError("diff must be non-zero, got 0")
    return int(diff)


class InputNode(Node):
    """Emits the updates given to its session."""

    def __init__(self, scope: Scope, name: str) -> None:
        super().__init__(scope, name=name)
        self.records: list[object] = []
        self.times: list[int] = []
        self.diffs: list[int] = []

    def step(self, frontier: Antichain) -> None:
        if self.records:
            ids = self.interner.ids(self.records)
            u = Updates(
                (ids,),
                np.asarray(self.times, dtype=np.int64).reshape(-1, 1),
                np.asarray(self.diffs, dtype=np.int64),
            )
            self.records, self.times, self.diffs = [], [], []
            self.emit(u)

    def pending_times(self) -> np.ndarray:
        return np.asarray(self.times, dtype=np.int64).reshape(-1, 1)


class InputSession:
    """The handle users feed: ``insert``, ``remove``, ``update``, ``advance_to``, ``close``."""

    def __init__(self, node: InputNode, collection) -> None:
        self._node = node
        self.collection = collection
        self.name = node.name
        self._frontier: int | None = T_MIN  # None once closed

    @property
    def frontier(self) -> Antichain:
        return Antichain() if self._frontier is None else Antichain([(self._frontier,)])

    @property
    def time(self) -> int | None:
        """The current input frontier (``None`` once closed)."""
        return self._frontier

    def insert(self, record: object, time: int) -> None:
        self.update(record, time, 1)

    def remove(self, record: object, time: int) -> None:
        self.update(record, time, -1)

    def update(self, record: object, time: int, diff: int = 1) -> None:
        t = check_time(time)
        d = check_diff(diff)
        if self._frontier is None:
            raise GraphError(f"input {self.name!r} is closed; cannot update {record!r}")
        if t < self._frontier:
            raise TimeError(f"input {self.name!r}: time {t} is behind the input frontier {self._frontier}")
        node = self._node
        node.records.append(record)
        node.times.append(t)
        node.diffs.append(d)

    def update_many(self, records, times, diffs) -> None:
        """Many updates at once (validated as a batch)."""
        for r, t, d in zip(records, times, diffs, strict=True):
            self.update(r, int(t), int(d))

    def advance_to(self, time: int) -> None:
        t = check_time(time, "advance_to time")
        if self._frontier is None:
            raise GraphError(f"input {self.name!r} is closed; cannot advance_to({t})")
        if t < self._frontier:
            raise TimeError(f"input {self.name!r}: advance_to({t}) is behind the frontier {self._frontier}")
        self._frontier = t

    def close(self) -> None:
        self._frontier = None
