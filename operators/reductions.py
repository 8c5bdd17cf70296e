"""The logic of reductions: a key's desired output given its input accumulated at some times.

Logic is evaluated at *points* (one key at one time) in bulk: point ``p`` has key ``keys[p]`` and the
non-zero accumulated input counts ``counts[offs[p]:offs[p+1]]`` of the vals ``vals[...]`` (val ids, in id
order). ``evaluate`` returns the desired output as sparse triples ``(point, out id, count)``. A point
whose input is empty has no entries and is never shown to user code (the 2015 post's rule).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .interner import Interner, sort_values

Sparse = tuple[np.ndarray, np.ndarray, np.ndarray]


def _empty() -> Sparse:
    e = np.empty(0, dtype=np.int64)
    return e, e, e


class Logic:
    """Desired output of a reduction at many (key, time) points."""

    output_is_key = False  # True: the output record is the key itself (distinct, threshold)

    def __init__(self, interner: Interner) -> None:
        self.interner = interner

    def evaluate(self, keys: np.ndarray, offs: np.ndarray, vals: np.ndarray, counts: np.ndarray) -> Sparse:
        """Per point, in Python: ``row(key, [val values], [counts]) -> {out id: count}``."""
        pts, outs, cnts = [], [], []
        values = self.interner.values(vals).tolist()
        counts_l = counts.tolist()
        for p, (key, lo, hi) in enumerate(zip(keys.tolist(), offs[:-1].tolist(), offs[1:].tolist())):
            if hi == lo:
                continue
            for o, c in self.row(key, values[lo:hi], counts_l[lo:hi]).items():
                if c:
                    pts.append(p)
                    outs.append(o)
                    cnts.append(c)
        if not pts:
            return _empty()
        return (np.asarray(pts, dtype=np.int64), np.asarray(outs, dtype=np.int64), np.asarray(cnts, dtype=np.int64))

    def row(self, key: int, vals: list, counts: list[int]) -> dict[int, int]:
        raise NotImplementedError


def _totals(offs: np.ndarray, counts: np.ndarray) -> np.ndarray:
    c = np.concatenate([[0], np.cumsum(counts)])
    return c[offs[1:]] - c[offs[:-1]]


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
            if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
                raise TypeError(f"reduce logic returned a non-int count {c!r} for output {o!r}")
            if c:
                i = self.interner.id(o)
                out[i] = out.get(i, 0) + int(c)
        return out


class Count(Logic):
    """``(record, multiplicity)``: one output per non-empty group."""

    def evaluate(self, keys, offs, vals, counts):
        nonempty = np.flatnonzero(offs[1:] > offs[:-1])
        total = _totals(offs, counts)[nonempty]
        uniq, inv = np.unique(total, return_inverse=True)
        out_ids = self.interner.ids(int(s) for s in uniq.tolist())
        return nonempty, out_ids[inv], np.ones(len(nonempty), dtype=np.int64)


class Threshold(Logic):
    """The record itself with multiplicity ``f(record, count)``; ``distinct`` is ``count > 0 -> 1``."""

    output_is_key = True

    def __init__(self, interner: Interner, f: Callable | None = None) -> None:
        super().__init__(interner)
        self.f = f
        self.unit = interner.id(())

    def evaluate(self, keys, offs, vals, counts):
        total = _totals(offs, counts)
        if self.f is None:
            mult = (total > 0).astype(np.int64)
        else:
            values = self.interner.values(keys).tolist()
            mult = np.array([int(self.f(v, int(c))) if c else 0 for v, c in zip(values, total.tolist())],
                            dtype=np.int64)
        pts = np.flatnonzero(mult)
        return pts, np.full(len(pts), self.unit, dtype=np.int64), mult[pts]


class Extremum(Logic):
    """The smallest (``min``) or largest (``max``) val with positive count, multiplicity 1."""

    def __init__(self, interner: Interner, largest: bool) -> None:
        super().__init__(interner)
        self.largest = largest

    def evaluate(self, keys, offs, vals, counts):
        if len(vals) == 0:
            return _empty()
        uniq, inv = np.unique(vals, return_inverse=True)
        order = np.asarray(sort_values(self.interner.values(uniq).tolist()), dtype=np.int64)
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[order] = np.arange(len(uniq)) if not self.largest else np.arange(len(uniq))[::-1]
        big = np.iinfo(np.int64).max
        r = np.where(counts > 0, rank[inv], big)
        nonempty = np.flatnonzero(offs[1:] > offs[:-1])
        best = np.minimum.reduceat(r, offs[:-1][nonempty]) if len(nonempty) else r[:0]
        has = best < big
        pts = nonempty[has]
        return pts, uniq[order[best[has]] if not self.largest else order[len(uniq) - 1 - best[has]]], \
            np.ones(len(pts), dtype=np.int64)


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
