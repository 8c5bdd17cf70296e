"""Columnar update batches and consolidation.

An update is ``(data, time, diff)``. A batch holds updates as numpy columns: one or more int64 data
columns (a record id, or a key id and a val id for keyed records), an ``(n, d)`` int64 ``times`` array
and an int64 ``diffs`` column. *Consolidation* sorts by (data, time), sums the diffs of equal
(data, time) and drops zeros: it changes no accumulation, at any time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, methodcaller

import numpy as np

from ..errors import DiffError
from ..frontier import Antichain, advance_by
from ..kernels.consolidate import SumOverflow
from ..kernels.consolidate import consolidate as kernel_consolidate


@dataclass(frozen=True, slots=True)
class Updates:
    """A batch of updates: ``data`` columns (tuple of int64 arrays), ``times`` (n, d), ``diffs`` (n,)."""

    data: tuple[np.ndarray, ...]
    times: np.ndarray
    diffs: np.ndarray

    @staticmethod
    def empty(width: int, depth: int) -> Updates:
        """No updates (one shared instance per shape: its columns are read-only)."""
        u = _EMPTY.get((width, depth))
        if u is None:
            columns = [np.empty(0, dtype=np.int64) for _ in range(width + 1)]
            times = np.empty((0, depth), dtype=np.int64)
            for c in (*columns, times):
                c.flags.writeable = False
            u = _EMPTY[(width, depth)] = Updates(tuple(columns[:-1]), times, columns[-1])
        return u

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def depth(self) -> int:
        return self.times.shape[1]

    def take(self, index: np.ndarray) -> Updates:
        """The updates at ``index``: a boolean mask or an integer index array."""
        # sorting.take's choice (compress or take, never fancy indexing) made once for every column
        pick = methodcaller("compress" if index.dtype == bool else "take", index, 0)
        return Updates(tuple(map(pick, self.data)), pick(self.times), pick(self.diffs))

    def with_times(self, times: np.ndarray) -> Updates:
        return Updates(self.data, times, self.diffs)

    def with_data(self, *data: np.ndarray) -> Updates:
        return Updates(tuple(data), self.times, self.diffs)

    def negate(self) -> Updates:
        """The updates with their diffs negated; raises :class:`DiffError` for a diff of ``-2**63``,
        whose negation int64 cannot hold."""
        d = self.diffs
        if len(d) and d.min() == np.iinfo(np.int64).min:
            i = int(np.argmin(d))
            raise sum_error(tuple(int(c[i]) for c in self.data), tuple(self.times[i].tolist()))
        return Updates(self.data, self.times, -d)

    def advance_by(self, frontier: Antichain) -> Updates:
        """Times advanced by ``frontier`` (see :func:`ddflow.operators.frontier.advance_by`)."""
        return self.with_times(advance_by(self.times, frontier))

    def consolidate(self) -> Updates:
        return consolidate(self)

    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.data) + self.times.nbytes + self.diffs.nbytes


_EMPTY: dict[tuple[int, int], Updates] = {}


_DATA, _TIMES, _DIFFS = attrgetter("data"), attrgetter("times"), attrgetter("diffs")


def concat(parts: Sequence[Updates], width: int | None = None, depth: int | None = None) -> Updates:
    """One batch holding every update of ``parts`` (in order)."""
    for p in parts:
        if not p.diffs.shape[0]:  # an empty one (nodes buffer none): left out
            parts = [p for p in parts if p.diffs.shape[0]]
            break
    if not parts:
        if width is None or depth is None:
            raise ValueError("concat of nothing needs width and depth")
        return Updates.empty(width, depth)
    if not parts[1:]:
        return parts[0]
    # the columns gathered by C getters over the parts (no Python call per part or column)
    columns = zip(*map(_DATA, parts))
    return Updates(tuple(map(np.concatenate, columns)), np.concatenate(list(map(_TIMES, parts))),
                   np.concatenate(list(map(_DIFFS, parts))))


def keyed_columns(u: Updates) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The columns ``(key, val, time, diff)`` of keyed updates, as kernels are compiled for them:
    writable (copies where ``u``'s are read-only, as :meth:`Updates.empty`'s shared ones are, which a
    concat of no rows gives). A read-only column would make numba compile another specialisation in
    the middle of a run: seconds of stall and ~100 MB."""
    columns = (u.data[0], u.data[1], u.times, u.diffs)
    if columns[0].flags.writeable and columns[1].flags.writeable and columns[2].flags.writeable \
            and columns[3].flags.writeable:
        return columns
    return tuple(c if c.flags.writeable else c.copy() for c in columns)


def by_width(parts: list[Updates]) -> list[list[Updates]]:
    """``parts`` grouped by their number of data columns (record ids: 1; a pair's two id columns, or
    a key's and a val's: 2), in that order, each group non-empty: ``[parts]`` itself when all have
    one width."""
    width = len(parts[0].data)
    for u in parts:
        if len(u.data) != width:
            groups = [[u for u in parts if len(u.data) == w] for w in (1, 2)]
            return [g for g in groups if g]
    return [parts]


def consolidate(u: Updates, runs: bool = False) -> Updates:
    """Sort by (data, time), sum diffs of equal (data, time), drop zero diffs, in one kernel call
    (:func:`ddflow.operators.kernels.consolidate.consolidate`); ``u`` itself when it is consolidated
    already. Raises :class:`DiffError` when the diffs of a (data, time) sum outside int64. ``runs`` is
    accepted for callers that know the updates are concatenated sorted runs; the kernel finds that
    out itself."""
    try:
        out = kernel_consolidate(u.data, u.times, u.diffs)
    except SumOverflow as exc:
        raise sum_error(exc.data, exc.time) from exc
    return u if out is None else Updates(*out)


def sum_error(ids: tuple[int, ...], time: tuple[int, ...]) -> DiffError:
    """The error for diffs of the record with interned ``ids`` at ``time`` that sum outside int64."""
    what = f"record id {ids[0]}" if len(ids) == 1 else "record ids " + ", ".join(map(str, ids))
    return DiffError(f"the diffs of {what} at time {tuple(time)} sum outside int64 (refused, not wrapped)",
                     record_ids=tuple(ids), time=tuple(time))


def beyond_split(u: Updates, frontier: Antichain) -> tuple[Updates, Updates]:
    """``(complete, pending)``: updates whose time is not beyond ``frontier``, and the rest."""
    mask, count = frontier.split(u.times)
    if count == 0:
        return u, Updates.empty(len(u.data), u.depth)
    if count == len(mask):
        return Updates.empty(len(u.data), u.depth), u
    return u.take(~mask), u.take(mask)
