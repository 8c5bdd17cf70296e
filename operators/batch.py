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

from .frontier import Antichain, advance_by


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
        return Updates(tuple(c[index] for c in self.data), self.times[index], self.diffs[index])

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
    columns = [*data, *(times[:, j] for j in range(times.shape[1]))]
    lows, widths = [], []
    for c in columns:
        lo, hi = int(c.min()), int(c.max())
        lows.append(lo)
        widths.append((hi - lo).bit_length())
    if sum(widths) > 63:
        return None
    key = np.zeros(len(times), dtype=np.int64)
    for c, lo, w in zip(columns, lows, widths):
        if w:
            key <<= w
            key |= c - lo
    return key


def sort_order(data: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """Indices sorting by data columns (first is most significant), then time coordinates."""
    key = packed_key(data, times) if len(times) else None
    if key is not None:
        return np.argsort(key, kind="stable")
    keys = [times[:, j] for j in range(times.shape[1] - 1, -1, -1)]
    keys.extend(reversed(data))
    return np.lexsort(keys)


def segment_starts(data: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """Boolean mask of rows (already sorted) that start a new (data, time) group."""
    n = len(times)
    change = np.zeros(n, dtype=bool)
    if n == 0:
        return change
    change[0] = True
    for c in data:
        change[1:] |= c[1:] != c[:-1]
    change[1:] |= np.any(times[1:] != times[:-1], axis=1)
    return change


def consolidate(u: Updates) -> Updates:
    """Sort by (data, time), sum diffs of equal (data, time), drop zero diffs."""
    n = len(u)
    if n == 0:
        return u
    key = packed_key(u.data, u.times)
    if key is not None:
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.empty(n, dtype=bool)
        starts[0] = True
        np.not_equal(key[1:], key[:-1], out=starts[1:])
    else:
        order = sort_order(u.data, u.times)
    data = tuple(c[order] for c in u.data)
    times = u.times[order]
    diffs = u.diffs[order]
    if key is None:
        starts = segment_starts(data, times)
    if starts.all():
        keep = diffs != 0
        if keep.all():
            return Updates(data, times, diffs)
        return Updates(tuple(c[keep] for c in data), times[keep], diffs[keep])
    idx = np.flatnonzero(starts)
    sums = np.add.reduceat(diffs, idx)
    keep = sums != 0
    idx = idx[keep]
    return Updates(tuple(c[idx] for c in data), times[idx], sums[keep])


def beyond_split(u: Updates, frontier: Antichain) -> tuple[Updates, Updates]:
    """``(complete, pending)``: updates whose time is not beyond ``frontier``, and the rest."""
    mask = frontier.beyond(u.times)
    if not mask.any():
        return u, Updates.empty(len(u.data), u.depth)
    if mask.all():
        return Updates.empty(len(u.data), u.depth), u
    return u.take(~mask), u.take(mask)
