"""The logic of reductions: what a key's output should be, given its input accumulated at some times.

Each logic maps ``acc`` — a ``(times, vals)`` matrix of accumulated counts for one key — to the desired
output as a dense ``(times, outs)`` matrix over a list of output ids. Rows whose input is empty are never
given to user code (the 2015 post's rule): their desired output is empty.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .interner import Interner, sort_values


class Logic:
    """Desired output of a reduction for one key at several times."""

    output_is_key = False  # True: the output record is the key itself (distinct, threshold)

    def __init__(self, interner: Interner) -> None:
        self.interner = interner

    def desired(self, key: int, vals: np.ndarray, acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        outs: dict[int, int] = {}
        rows: list[dict[int, int]] = []
        values = None
        for r in range(acc.shape[0]):
            nz = np.flatnonzero(acc[r])
            if len(nz) == 0:
                rows.append({})
                continue
            if values is None:
                values = self.interner.values(vals).tolist()
            row = self.row(key, [values[i] for i in nz], acc[r, nz].tolist())
            rows.append(row)
            for o in row:
                outs.setdefault(o, len(outs))
        out_ids = np.fromiter(outs, dtype=np.int64, count=len(outs))
        dense = np.zeros((acc.shape[0], len(outs)), dtype=np.int64)
        for r, row in enumerate(rows):
            for o, c in row.items():
                dense[r, outs[o]] += c
        return out_ids, dense

    def row(self, key: int, vals: list, counts: list[int]) -> dict[int, int]:
        raise NotImplementedError


class UserReduce(Logic):
    """``f(key, [(val, count), ...]) -> [(out, count), ...]`` with vals sorted."""

    def __init__(self, interner: Interner, f: Callable) -> None:
        super().__init__(interner)
        self.f = f

    def row(self, key, vals, counts):
        order = sort_values(vals)
        result = self.f(self.interner.value(key), [(vals[i], counts[i]) for i in order])
        out: dict[int, int] = {}
        for o, c in result:
            if c:
                i = self.interner.id(o)
                out[i] = out.get(i, 0) + int(c)
        return out


class Count(Logic):
    """``(record, multiplicity)``: one output per non-empty group."""

    def desired(self, key, vals, acc):
        total = acc.sum(axis=1)
        nonempty = np.any(acc != 0, axis=1)
        uniq = np.unique(total[nonempty])
        out_ids = self.interner.ids(int(s) for s in uniq.tolist())
        dense = np.zeros((acc.shape[0], len(uniq)), dtype=np.int64)
        rows = np.flatnonzero(nonempty)
        dense[rows, np.searchsorted(uniq, total[rows])] = 1
        return out_ids, dense


class Threshold(Logic):
    """The record itself with multiplicity ``f(record, count)``; ``distinct`` is ``count > 0 -> 1``."""

    output_is_key = True

    def __init__(self, interner: Interner, f: Callable | None = None) -> None:
        super().__init__(interner)
        self.f = f
        self.unit = interner.id(())

    def desired(self, key, vals, acc):
        total = acc.sum(axis=1)
        if self.f is None:
            mult = (total > 0).astype(np.int64)
        else:
            value = self.interner.value(key)
            mult = np.array([int(self.f(value, int(c))) if c else 0 for c in total.tolist()], dtype=np.int64)
        return np.array([self.unit], dtype=np.int64), mult.reshape(-1, 1)


class Extremum(Logic):
    """The smallest (``min``) or largest (``max``) val with positive count, multiplicity 1."""

    def __init__(self, interner: Interner, largest: bool) -> None:
        super().__init__(interner)
        self.largest = largest

    def desired(self, key, vals, acc):
        order = np.asarray(sort_values(self.interner.values(vals).tolist()), dtype=np.int64)
        if self.largest:
            order = order[::-1]
        pos = acc[:, order] > 0
        has = pos.any(axis=1)
        first = order[np.argmax(pos, axis=1)]
        uniq = np.unique(first[has])
        dense = np.zeros((acc.shape[0], len(uniq)), dtype=np.int64)
        rows = np.flatnonzero(has)
        dense[rows, np.searchsorted(uniq, first[rows])] = 1
        return vals[uniq], dense


class Sum(Logic):
    """``sum(val * count)`` with multiplicity 1."""

    def row(self, key, vals, counts):
        return {self.interner.id(sum(v * c for v, c in zip(vals, counts))): 1}


class TopK(Logic):
    """The ``k`` largest elements of the multiset of vals with positive counts."""

    def __init__(self, interner: Interner, k: int) -> None:
        super().__init__(interner)
        self.k = k

    def row(self, key, vals, counts):
        out: dict[int, int] = {}
        left = self.k
        for i in reversed(sort_values(vals)):
            if left <= 0:
                break
            if counts[i] > 0:
                take = min(counts[i], left)
                out[self.interner.id(vals[i])] = take
                left -= take
        return out
