"""Immutable sorted batches in trie layout.

A ``TrieBatch`` holds consolidated keyed updates ``((key, val), time, diff)`` sorted by key, val and
time, as a columnar trie: ``keys`` (distinct, sorted) with ``key_offs`` into ``vals``; ``vals`` (sorted
within a key) with ``val_offs`` into the ``times``/``diffs`` histories. Its ``Description`` says which
updates it holds: those with ``lower <= time`` and not ``upper <= time``, with times advanced to ``since``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..frontier import Antichain
from ..kernels.gather import ranges_to_index
from .batch import Updates


@dataclass(frozen=True, slots=True)
class Description:
    """The time interval ``[lower, upper)`` of a batch's updates, and the frontier ``since`` they are advanced to."""

    lower: Antichain
    upper: Antichain
    since: Antichain


class TrieBatch:
    """Consolidated keyed updates in a keys -> vals -> (time, diff) trie."""

    __slots__ = ("keys", "key_offs", "vals", "val_offs", "times", "diffs", "desc")

    def __init__(self, keys, key_offs, vals, val_offs, times, diffs, desc: Description) -> None:
        self.keys, self.key_offs, self.vals, self.val_offs = keys, key_offs, vals, val_offs
        self.times, self.diffs, self.desc = times, diffs, desc

    @staticmethod
    def from_updates(u: Updates, desc: Description) -> TrieBatch:
        """Build from keyed updates ``data == (keys, vals)`` that are consolidated (sorted, no zeros)."""
        k, v = u.data
        n = len(u)
        if n == 0:
            e = np.empty(0, dtype=np.int64)
            z = np.zeros(1, dtype=np.int64)
            return TrieBatch(e, z, e, z, u.times, u.diffs, desc)
        new_val = np.ones(n, dtype=bool)
        new_val[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
        val_starts = np.flatnonzero(new_val)
        vk = k[val_starts]
        new_key = np.ones(len(val_starts), dtype=bool)
        new_key[1:] = vk[1:] != vk[:-1]
        key_starts = np.flatnonzero(new_key)
        return TrieBatch(
            vk[key_starts],
            np.append(key_starts, len(val_starts)).astype(np.int64),
            v[val_starts],
            np.append(val_starts, n).astype(np.int64),
            u.times,
            u.diffs,
            desc,
        )

    def __len__(self) -> int:
        return len(self.diffs)

    @property
    def depth(self) -> int:
        return self.times.shape[1]

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.keys, self.key_offs, self.vals, self.val_offs, self.times, self.diffs))

    def flat(self, lo: int = 0, hi: int | None = None) -> Updates:
        """The updates of keys with index in ``[lo, hi)`` as flat columns ``(key, val)``."""
        hi = len(self.keys) if hi is None else hi
        v0, v1 = self.key_offs[lo], self.key_offs[hi]
        h0, h1 = self.val_offs[v0], self.val_offs[v1]
        hist_per_val = np.diff(self.val_offs[v0 : v1 + 1])
        hist_per_key = self.val_offs[self.key_offs[lo + 1 : hi + 1]] - self.val_offs[self.key_offs[lo:hi]]
        keys = np.repeat(self.keys[lo:hi], hist_per_key)
        vals = np.repeat(self.vals[v0:v1], hist_per_val)
        return Updates((keys, vals), self.times[h0:h1], self.diffs[h0:h1])

    def key_weights(self) -> np.ndarray:
        """Number of (time, diff) entries under each key."""
        return self.val_offs[self.key_offs[1:]] - self.val_offs[self.key_offs[:-1]]

    def lookup(self, query: np.ndarray) -> Updates:
        """All updates whose key is in ``query`` (sorted, distinct): one ``searchsorted`` for all keys."""
        if len(self.keys) == 0 or len(query) == 0:
            return Updates.empty(2, self.depth)
        idx = np.searchsorted(self.keys, query)
        idx_c = np.minimum(idx, len(self.keys) - 1)
        found = self.keys[idx_c] == query
        ki = idx_c[found]
        if len(ki) == 0:
            return Updates.empty(2, self.depth)
        v0, v1 = self.key_offs.take(ki), self.key_offs.take(ki + 1)
        h0, h1 = self.val_offs.take(v0), self.val_offs.take(v1)
        rows = ranges_to_index(h0, h1)
        keys = np.repeat(query.compress(found), h1 - h0)
        vi = ranges_to_index(v0, v1)
        vals = np.repeat(self.vals.take(vi), self.val_offs.take(vi + 1) - self.val_offs.take(vi))
        return Updates((keys, vals), self.times.take(rows, axis=0), self.diffs.take(rows))


