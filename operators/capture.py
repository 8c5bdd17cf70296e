"""Captures: the output end of a dataflow, holding every final update it has seen.

A capture accumulates the updates at complete times (not beyond the output frontier). ``at(t)`` gives the
collection accumulated at a complete time ``t``; ``updates`` the consolidated differences; ``drain()``
returns and forgets the final updates received since the last drain (how the daemon publishes epochs).

A capture takes pair records as two id columns (``Node.pair_columns``): a producer whose records are
pairs built from id columns (the interning operator's ``(record, id)``) hands them over as they are,
and no pair id is interned for them. The record is the pair of the two columns' values.
"""

from __future__ import annotations

import numpy as np

from .errors import DiffError, IncompleteTimeError
from .frontier import Antichain
from .graph import Node, Scope, describe_ids
from .lattice import to_scalar
from .traces.batch import Updates, concat, consolidate


class Capture(Node):
    """Collects the final updates of a collection."""

    observes_frontier = True  # the output frontier is what ``at`` checks
    pair_columns = True

    def __init__(self, scope: Scope, *, history: bool = True) -> None:
        super().__init__(scope, name="capture")
        self.history = history
        self._width = 0  # data columns of the updates held: 1 (record ids) or 2 (pairs); 0 before any
        self._held = Updates.empty(1, scope.depth)
        self._undrained: list[Updates] = []
        self._frontier = Antichain([(np.iinfo(np.int64).min,)])

    def step(self, frontier: Antichain) -> None:
        """Take the updates complete at ``frontier`` and record the frontier."""
        buffered = self.buffers[0]
        if buffered:  # pair columns from one producer, record ids from another: all as record ids
            width = self._width or len(buffered[0].data)
            for b in buffered:
                if len(b.data) != width:
                    self._one_width()
                    width = 1
                    break
            self._width = width
        u = self.take_complete(frontier, width=self._width or 1)
        if len(u):
            if self.history:
                self._held = consolidate(concat([self._held, u]))
            self._undrained.append(u)
        self._frontier = frontier

    def held_ids(self):
        """The ids of the updates held: the history (``updates``) and those not drained yet."""
        yield from super().held_ids()
        yield from self._held.data
        for u in self._undrained:
            yield from u.data

    def _one_width(self) -> None:
        """Every batch held or buffered as record ids (pairs of columns interned as pair ids)."""
        pair = self.interner.pair

        def ids(u: Updates) -> Updates:
            return u if len(u.data) == 1 else Updates((pair(*u.data),), u.times, u.diffs)

        self.buffers[0] = [ids(u) for u in self.buffers[0]]
        self._held = ids(self._held)
        self._undrained = [ids(u) for u in self._undrained]
        self._width = 1

    @property
    def frontier(self) -> list:
        """The output frontier: times at or beyond it may still change."""
        return [to_scalar(t) for t in self._frontier.elements]

    def _check_complete(self, time) -> None:
        if self._frontier.less_equal(time):
            raise IncompleteTimeError(f"time {time!r} is not complete: the output frontier is {self.frontier}")

    def at(self, time) -> dict:
        """``{record: multiplicity}`` accumulated at the complete time ``time``; raises
        :class:`DiffError` when a multiplicity there is outside int64."""
        self._check_complete(time)
        u = self._held
        t = np.asarray(time if isinstance(time, tuple) else (time,), dtype=np.int64)
        before = u.take(np.all(u.times <= t, axis=1))
        try:
            acc = consolidate(before.with_times(np.zeros((len(before), 1), dtype=np.int64)))
        except DiffError as exc:
            raise DiffError(f"{self.name}: the multiplicity of {describe_ids(self, exc.record_ids)} at time "
                            f"{time!r} is outside int64", record_ids=exc.record_ids, time=tuple(t.tolist()),
                            operator=self.name) from exc
        return dict(zip(self._records(acc), acc.diffs.tolist()))

    @property
    def updates(self) -> list[tuple[object, object, int]]:
        """The consolidated list of ``(record, time, diff)`` received so far."""
        return self._as_list(self._held)

    def drain(self) -> list[tuple[object, object, int]]:
        """The consolidated final updates received since the previous drain; raises
        :class:`DiffError` (naming the record and time; nothing is forgotten) when the diffs of a
        record at one time sum outside int64."""
        return self._as_list(self._drained())

    def drain_columns(self) -> tuple[np.ndarray | list, np.ndarray, np.ndarray]:
        """`drain` as columns ``(records, times, diffs)`` (a capture of the outer scope: ``times``
        and ``diffs`` int64): ``records`` an int64 column when every record is a plain int, an
        ``(n, 2)`` int64 array when every one is a pair of plain ints (of magnitude below ``2**62``,
        see ``Interner.int_columns``), else a list of the values. No Python object per update
        when the records are columns."""
        u = self._drained()
        interner = self.interner
        if len(u.data) == 1:
            columns = interner.int_columns(u.data[0])
        else:
            parts = [interner.int_columns(c) for c in u.data]
            columns = None if any(p is None or p.ndim != 1 for p in parts) else np.column_stack(parts)
        records = self._records(u) if columns is None else columns
        return records, u.times[:, 0].copy(), u.diffs

    def _drained(self) -> Updates:
        try:
            u = consolidate(concat(self._undrained, self._width or 1, self.scope.depth))
        except DiffError as exc:
            time = exc.time if exc.time is None or len(exc.time) != 1 else exc.time[0]
            raise DiffError(f"{self.name}: the diffs of {describe_ids(self, exc.record_ids)} at time {time!r} sum "
                            "outside int64 (refused, not wrapped)", record_ids=exc.record_ids, time=exc.time,
                            operator=self.name) from exc
        self._undrained = []
        return u

    def _records(self, u: Updates) -> list:
        """The records of ``u`` as values: one per id, or the pairs of two columns' values."""
        if len(u.data) == 1:
            return self.interner.value_list(u.data[0])
        return list(zip(*(self.interner.value_list(c) for c in u.data)))

    def _as_list(self, u: Updates) -> list[tuple[object, object, int]]:
        recs = self._records(u)
        if u.depth == 1:
            return list(zip(recs, u.times[:, 0].tolist(), u.diffs.tolist()))
        return [(r, to_scalar(t), d) for r, t, d in zip(recs, u.times.tolist(), u.diffs.tolist())]
