"""A fueled merge of two adjacent trie batches.

A ``Merge`` of two adjacent batches proceeds key by key in the merge kernel
(:mod:`ddflow.operators.kernels.merge`): each key's times are advanced by the compaction frontier of
the moment and consolidated, so that its work can be spread over many insertions (fuel). Any number
of merges advance together in one kernel call (:func:`work`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DiffError
from ..frontier import Antichain, advance_by
from ..kernels import merge as kernel
from ..kernels import trie as layout
from .batch import sum_error
from .trie import Description, TrieBatch

_TRIM = 0.75  # a result using less of its merge buffer than this is copied out (the rest freed)


def frontier_array(frontier: Antichain, depth: int) -> np.ndarray:
    """The frontier as the ``(m, depth)`` int64 array kernels take (``m == 0``: nothing advances)."""
    return frontier.array(depth)


class Merge:
    """A merge in progress of two adjacent batches, advanced to ``frontier`` and consolidated key by key."""

    __slots__ = ("older", "newer", "frontier", "buffer", "address")

    def __init__(self, older: TrieBatch, newer: TrieBatch, frontier: Antichain) -> None:
        self.older, self.newer, self.frontier = older, newer, frontier  # may advance while merging
        d = older.depth
        room = layout.size(older.nk + newer.nk, older.nv + newer.nv, older.n + newer.n, d)
        self.buffer = np.empty(kernel.HEADER + room, dtype=np.int64)
        self.address = kernel.begin(self.buffer, *older.row, *newer.row, d)

    def __len__(self) -> int:
        return len(self.older) + len(self.newer)

    @property
    def done(self) -> bool:
        """True once every key is merged (the result is ready)."""
        return bool(self.buffer[kernel.STATUS] == kernel.DONE)

    @property
    def work_done(self) -> int:
        """Input updates merged so far."""
        return int(self.buffer[kernel.WORK])

    def work(self, fuel: int, frontier: Antichain | None = None) -> int:
        """Merge keys until about ``fuel`` updates have been processed; return fuel left.

        ``frontier``, when given, is the trace's current compaction frontier: it is never behind the
        one the merge started with, so the remaining keys may be advanced by it instead."""
        if frontier is not None:
            self.frontier = frontier
        before = self.work_done
        work([self], frontier_array(self.frontier, self.older.depth), fuel)
        return max(fuel - (self.work_done - before), 0)

    def check(self) -> None:
        """Raise :class:`DiffError` when the merge stopped on a sum of diffs outside int64."""
        if self.buffer[kernel.STATUS] == kernel.OVERFLOW:
            key, val = int(self.buffer[kernel.BAD_KEY]), int(self.buffer[kernel.BAD_VAL])
            raise merge_error([self.older, self.newer], key, val, self.frontier)

    def result(self, since: Antichain | None = None) -> TrieBatch:
        """The merged batch (only once :attr:`done`). ``since``: the frontier of the merge's last step
        when a caller stepped it through :func:`work` (default: the frontier it was last given)."""
        b = self.buffer
        d = self.older.depth
        nk, nv, n = int(b[kernel.OUT_KEYS]), int(b[kernel.OUT_VALS]), int(b[kernel.OUT_UPDATES])
        since = self.frontier if since is None else since
        desc = Description((self.older.desc.lower, self.newer.desc.upper, since))
        end = kernel.HEADER + layout.size(nk, nv, n, d)
        if end < _TRIM * len(b):
            return TrieBatch(b[kernel.HEADER : end].copy(), nk, nv, n, d, desc)
        return TrieBatch(b[kernel.HEADER : end], nk, nv, n, d, desc, self.address + 8 * kernel.HEADER)


def merge_error(batches: Sequence[TrieBatch], key: int, val: int, frontier: Antichain) -> DiffError:
    """The error for the diffs of ``(key, val)`` that sum outside int64 when ``batches`` merge with times
    advanced by ``frontier``, naming the time (found again with Python's exact integers)."""
    sums: dict[tuple[int, ...], int] = {}
    for b in batches:
        u = b.lookup(np.asarray([key], dtype=np.int64))
        times = advance_by(np.ascontiguousarray(u.times), frontier).tolist()
        for v, t, x in zip(u.data[1].tolist(), times, u.diffs.tolist(), strict=True):
            if v == val:
                sums[tuple(t)] = sums.get(tuple(t), 0) + x
    outside = [t for t, x in sorted(sums.items()) if not -(2**63) <= x < 2**63]
    time = outside[0] if outside else max(sums, key=lambda t: abs(sums[t]), default=())
    return sum_error((key, val), time)


def work(merges: Sequence[Merge], frontier: np.ndarray, fuel: int, table: np.ndarray | None = None) -> int:
    """Give each merge ``fuel`` in one kernel call (times advanced by the ``(m, d)`` array ``frontier``);
    the number of merges that finished. ``table``: the merges' addresses, when the caller keeps it.
    A merge stopped by a sum of diffs outside int64 raises :class:`DiffError`."""
    if table is None:
        table = np.asarray([m.address for m in merges], dtype=np.int64)
    changed = kernel.work(table, frontier, fuel)
    if changed:
        for m in merges:
            m.check()
    return changed
