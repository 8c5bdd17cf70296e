"""Columnar update batches and consolidation.

An update is ``(data, time, diff)``. A batch holds updates as numpy columns: one or more int64 data
columns (a record id, or a key id and a val id for keyed records), an ``(n, d)`` int64 ``times`` array
and an int64 ``diffs`` column. *Consolidation* sorts by (data, time), sums the diffs of equal
(data, time) and drops zeros: it changes no accumulation, at any time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..frontier import Antichain, advance_by
from ..kernels.sorting import argsort, order, pack, starts, take


@dataclass(frozen=True, slots=True)
class Updates:
    """A batch of updates: ``data`` columns (tuple of int64 arrays), ``times`` (n, d), ``diffs`` (n,)."""

    data: tuple[np.ndarray, ...]
    times: np.ndarray
    diffs: np.ndarray

    @staticmethod
    def empty(width: int, depth: int) -> Updates:
        return Updates(
            tuple(np.empty(0, dtype=np.int64) for _ in range(width)),
            np.empty((0, depth), dtype=np.int64),
            np.empty(0, dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def depth(self) -> int:
        return self.times.shape[1]

    def take(self, index: np.ndarray) -> Updates:
        """The updates at ``index``: a boolean mask or an integer index array."""
        return Updates(tuple(take(c, index) for c in self.data), take(self.times, index), take(self.diffs, index))

    def with_times(self, times: np.ndarray) -> Updates:
        return Updates(self.data, times, self.diffs)

    def with_data(self, *data: np.ndarray) -> Updates:
        return Updates(tuple(data), self.times, self.diffs)

    def negate(self) -> Updates:
        return Updates(self.data, self.times, -self.diffs)

    def advance_by(self, frontier: Antichain) -> Updates:
        """Times advanced by ``frontier`` (see :func:`ddflow.operators.frontier.advance_by`)."""
        return self.with_times(advance_by(self.times, frontier))

    def consolidate(self) -> Updates:
        return consolidate(self)

    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.data) + self.times.nbytes + self.diffs.nbytes


def concat(parts: Sequence[Updates], width: int | None = None, depth: int | None = None) -> Updates:
    """One batch holding every update of ``parts`` (in order)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        if width is None or depth is None:
            raise ValueError("concat of nothing needs width and depth")
        return Updates.empty(width, depth)
    if len(parts) == 1:
        return parts[0]
    w = len(parts[0].data)
    return Updates(
        tuple(np.concatenate([p.data[i] for p in parts]) for i in range(w)),
        np.concatenate([p.times for p in parts]),
        np.concatenate([p.diffs for p in parts]),
    )


def packed_key(data: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray | None:
    """One int64 per row ordering rows like (data columns, time coordinates), or ``None`` when the
    columns' ranges do not fit together in 63 bits."""
    return pack([*data, *(times[:, j] for j in range(times.shape[1]))])


def sort_order(data: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """Indices sorting by data columns (first is most significant), then time coordinates (rows with
    equal columns in any order)."""
    return order([*data, *(times[:, j] for j in range(times.shape[1]))])


def segment_starts(data: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """Boolean mask of rows (already sorted) that start a new (data, time) group."""
    return starts([*data, *(times[:, j] for j in range(times.shape[1]))])


def consolidate(u: Updates, runs: bool = False) -> Updates:
    """Sort by (data, time), sum diffs of equal (data, time), drop zero diffs. ``runs``: the updates
    are a concatenation of a few sorted runs (see :func:`ddflow.operators.kernels.sorting.order`)."""
    n = len(u)
    if n == 0:
        return u
    key = packed_key(u.data, u.times)
    if key is not None and (n == 1 or (key[1:] > key[:-1]).all()):  # already consolidated but for zeros
        keep = u.diffs != 0
        return u if keep.all() else u.take(keep)
    if key is not None:
        perm = argsort(key, runs)
        first = starts((key.take(perm),))
    else:
        perm = sort_order(u.data, u.times)
    data = tuple(c.take(perm) for c in u.data)
    times = u.times.take(perm, axis=0)
    diffs = u.diffs.take(perm)
    if key is None:
        first = segment_starts(data, times)
    if first.all():
        keep = diffs != 0
        if keep.all():
            return Updates(data, times, diffs)
        return Updates(tuple(c.compress(keep) for c in data), times.compress(keep, axis=0), diffs.compress(keep))
    idx = np.flatnonzero(first)
    sums = np.add.reduceat(diffs, idx)
    keep = sums != 0
    idx = idx.compress(keep)
    return Updates(tuple(c.take(idx) for c in data), times.take(idx, axis=0), sums.compress(keep))


def beyond_split(u: Updates, frontier: Antichain) -> tuple[Updates, Updates]:
    """``(complete, pending)``: updates whose time is not beyond ``frontier``, and the rest."""
    mask = frontier.beyond(u.times)
    if not mask.any():
        return u, Updates.empty(len(u.data), u.depth)
    if mask.all():
        return Updates.empty(len(u.data), u.depth), u
    return u.take(~mask), u.take(mask)
