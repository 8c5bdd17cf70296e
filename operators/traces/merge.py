"""A fueled merge of two adjacent trie batches.

A ``Merge`` of two adjacent batches proceeds in key ranges, each range advanced by the compaction
frontier and consolidated, so that its work can be spread over many insertions (fuel).
"""

from __future__ import annotations

import numpy as np

from ..frontier import Antichain
from .batch import Updates, concat, consolidate
from .trie import Description, TrieBatch


class Merge:
    """A merge in progress of two adjacent batches, advanced to ``frontier`` and consolidated by key range."""

    def __init__(self, older: TrieBatch, newer: TrieBatch, frontier: Antichain) -> None:
        self.older, self.newer, self.frontier = older, newer, frontier  # may advance while merging
        self._pos = [0, 0]
        self._chunks: list[Updates] = []
        self._w: list[np.ndarray] | None = None  # cumulative weights per key, computed when chunking
        self.work_done = 0

    def __len__(self) -> int:
        return len(self.older) + len(self.newer)

    @property
    def done(self) -> bool:
        return self._pos[0] >= len(self.older.keys) and self._pos[1] >= len(self.newer.keys)

    def work(self, fuel: int, frontier: Antichain | None = None) -> int:
        """Merge key ranges until about ``fuel`` updates have been processed; return fuel left.

        ``frontier``, when given, is the trace's current compaction frontier: it is never behind the
        one the merge started with, so the remaining ranges may be advanced by it instead."""
        if frontier is not None:
            self.frontier = frontier
        a, b = self.older, self.newer
        if self._pos == [0, 0] and len(self) <= fuel:  # the whole merge fits: one pass, no key ranges
            part = concat([a.flat(), b.flat()], 2, a.depth)
            self._chunks.append(consolidate(part.advance_by(self.frontier), runs=True))
            self._pos = [len(a.keys), len(b.keys)]
            self.work_done += len(part)
            return fuel - len(part)
        if self._w is None:
            self._w = [np.cumsum(a.key_weights()), np.cumsum(b.key_weights())]
        while fuel > 0 and not self.done:
            p0, p1 = self._pos
            base0 = self._w[0][p0 - 1] if p0 else 0
            # the split key: where the older batch has consumed its share of the fuel
            if p0 < len(a.keys):
                j0 = int(np.searchsorted(self._w[0], base0 + max(fuel // 2, 1)))
                j0 = min(max(j0, p0 + 1), len(a.keys))
                bound = a.keys[j0] if j0 < len(a.keys) else None
            else:
                j0, bound = p0, None
            j1 = len(b.keys) if bound is None else int(np.searchsorted(b.keys, bound))
            j1 = max(j1, p1)
            if bound is None and p0 >= len(a.keys):
                base1 = self._w[1][p1 - 1] if p1 else 0
                j1 = min(max(int(np.searchsorted(self._w[1], base1 + fuel)), p1 + 1), len(b.keys))
            part = concat([a.flat(p0, j0), b.flat(p1, j1)], 2, a.depth)
            self._pos = [j0, j1]
            if len(part):
                self._chunks.append(consolidate(part.advance_by(self.frontier), runs=True))
            fuel -= len(part)
            self.work_done += len(part)
        return max(fuel, 0)

    def result(self) -> TrieBatch:
        desc = Description(self.older.desc.lower, self.newer.desc.upper, self.frontier)
        return TrieBatch.from_updates(concat(self._chunks, 2, self.older.depth), desc)
