"""The logic of reductions: a key's desired output given its input accumulated at some times.

Logic is evaluated at *points* (one key at one time) in bulk: point ``p`` has key ``keys[p]`` and the
non-zero accumulated input counts ``counts[offs[p]:offs[p+1]]`` of the vals ``vals[...]`` (val ids, in id
order). ``evaluate`` returns the desired output as sparse triples ``(point, out id, count)``. A point
whose input is empty has no entries and is never shown to user code (the 2015 post's rule).

The compiled tactic asks a logic for its ``plan`` (which of the round kernel's modes evaluates it,
with which order of the vals) and hands the kernel's triples to ``finish``, which turns them into out
ids: built-in logics run inside the kernel, logic written in Python gets the groups (``GROUPS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress

import numpy as np

from ...tuning import DEFAULT
from ...errors import DiffError
from ...kernels.consolidate import INT64_LIMIT, outside_int64, sums_fit
from ...kernels.reduce import GROUPS, LEAST, POSITIVE, SUM, TOP, TOTAL
from ...kernels.sorting import distinct
from ...values.interner import Interner
from ...values.ordering import sort_values
from ..calls import call_all

Sparse = tuple[np.ndarray, np.ndarray, np.ndarray]


def _empty() -> Sparse:
    e = np.empty(0, dtype=np.int64)
    return e, e, e


_SEQUENCES = frozenset((list, tuple))


class Logic:
    """Desired output of a reduction at many (key, time) points."""

    output_is_key = False  # True: the output record is the key itself (distinct, threshold)
    # (mode, k) of a plan that reads no val (a mode of ``step.FINISHED``, the val ids their own order):
    # the compiled round may then read the histories from the traces itself; None: ``plan`` decides
    traced_plan: tuple[int, int] | None = None

    def __init__(self, interner: Interner, *, chunk: int = DEFAULT.user_chunk) -> None:
        self.interner = interner
        self.chunk = chunk  # points per bulk call of user code (bounds the Python objects alive at once)

    def evaluate(self, keys: np.ndarray, offs: np.ndarray, vals: np.ndarray, counts: np.ndarray) -> Sparse:
        """Per point, in Python: ``row(key value, [val values], [counts]) -> [(out value, count)]``,
        in chunks of points whose outputs are interned together."""
        parts = [self._chunk(keys, offs, vals, counts, lo, min(lo + self.chunk, len(keys)))
                 for lo in range(0, len(keys), self.chunk)]
        parts = [p for p in parts if len(p[0])]
        if not parts:
            return _empty()
        return tuple(np.concatenate(cols) for cols in zip(*parts))

    def _chunk(self, keys, offs, vals, counts, lo: int, hi: int) -> Sparse:
        a, b = int(offs[lo]), int(offs[hi])
        key_values = self.interner.value_list(keys[lo:hi])
        values = self.interner.value_list(vals[a:b])
        counts_l = counts[a:b].tolist()
        bounds = (offs[lo : hi + 1] - a).tolist()
        results = []
        points = []
        for p, key in enumerate(key_values):
            i, j = bounds[p], bounds[p + 1]
            if i < j:
                results.append(self.row(key, values[i:j], counts_l[i:j]))
                points.append(p)
        return self._collect(results, points, lo)

    def _collect(self, results: list, points: list, base: int) -> Sparse:
        """Sparse ``(point, out id, count)`` from the rows' ``[(out value, count)]`` results."""
        try:
            if results.count(()) == len(results):  # all empty (the empty tuple is one object: fast)
                return _empty()
        except Exception:  # a result whose == is not a bool
            pass
        if set(map(type, results)) <= _SEQUENCES:  # lists and tuples: skip the empty ones in one pass
            keep = list(compress(range(len(results)), results))
            points, results = [points[i] for i in keep], [results[i] for i in keep]
        pts, outs, cnts = [], [], []
        for p, result in zip(points, results):
            for o, c in result:
                if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
                    raise DiffError(f"reduce logic returned a non-int count {c!r} for output {o!r}")
                if c:
                    pts.append(p)
                    outs.append(o)
                    cnts.append(_int64_count(int(c), o))
        if not pts:
            return _empty()
        pts_a = np.asarray(pts, dtype=np.int64) + base
        out_ids = self.interner.ids(outs)
        cnt_a = np.asarray(cnts, dtype=np.int64)
        # one entry per (point, output): counts of equal outputs of a point add up, zeros go
        order = np.lexsort((out_ids, pts_a))
        pts_a, out_ids, cnt_a = pts_a[order], out_ids[order], cnt_a[order]
        first = np.ones(len(pts_a), dtype=bool)
        first[1:] = (pts_a[1:] != pts_a[:-1]) | (out_ids[1:] != out_ids[:-1])
        idx = np.flatnonzero(first)
        if sums_fit(len(cnt_a), cnt_a):
            sums = np.add.reduceat(cnt_a, idx)
        else:  # counts of equal outputs summed exactly
            sums = np.add.reduceat(cnt_a.astype(object), idx)
            bad = np.flatnonzero(outside_int64(sums))
            if len(bad):
                raise PointOverflow(int(pts_a[idx[bad[0]]]))
            sums = sums.astype(np.int64)
        keep = sums != 0
        return pts_a[idx[keep]], out_ids[idx[keep]], sums[keep]

    def row(self, key: object, vals: list, counts: list[int]) -> Iterable[tuple[object, int]]:
        raise NotImplementedError

    # -- the compiled tactic ------------------------------------------------------------------------
    def plan(self, vals: np.ndarray) -> tuple[int, np.ndarray, int]:
        """``(mode, order, k)`` for the round kernel on input rows with val ids ``vals``: ``order``
        orders the vals as the mode reads them (see :mod:`ddflow.operators.kernels.reduce.points`)."""
        return GROUPS, vals, 0

    def finish(self, mode: int, keys: np.ndarray, dp: np.ndarray, dv: np.ndarray, dc: np.ndarray) -> Sparse:
        """The desired output ``(point, out id, count)`` from the kernel's triples in ``mode`` (as
        planned, or ``GROUPS``); ``keys`` holds each point's key id."""
        offs = np.searchsorted(dp, np.arange(len(keys) + 1))
        return self.evaluate(keys, offs, dv, dc)

    def value_order(self, vals: np.ndarray) -> np.ndarray:
        """Per val id, an int ordering the vals by value: the value itself when every val is an int
        well inside int64 (the interner tells, without a Python object), else the val's rank among
        ``vals`` by Python order (one sort of the distinct vals)."""
        ints = self.interner.int_values(vals)
        if ints is not None:
            return ints
        uniq = distinct(vals)
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[np.asarray(sort_values(self.interner.value_list(uniq)), dtype=np.int64)] = np.arange(len(uniq))
        return rank.take(np.searchsorted(uniq, vals))


class PointOverflow(ArithmeticError):
    """The counts of point ``point`` sum outside int64 (the caller names its key and time)."""

    def __init__(self, point: int) -> None:
        super().__init__(f"the counts of point {point} sum outside int64")
        self.point = point


def _totals(offs: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per point, the sum of its counts; exact (raises :class:`PointOverflow` outside int64)."""
    longest = int((offs[1:] - offs[:-1]).max()) if len(offs) > 1 else 0
    if sums_fit(longest, counts):
        c = np.concatenate([[0], np.cumsum(counts)])
        return c[offs[1:]] - c[offs[:-1]]
    c = np.concatenate([[0], np.cumsum(counts.astype(object))])
    total = c[offs[1:]] - c[offs[:-1]]
    bad = np.flatnonzero(outside_int64(total))
    if len(bad):
        raise PointOverflow(int(bad[0]))
    return total.astype(np.int64)


def _int64_count(c: int, o: object) -> int:
    if not -INT64_LIMIT <= c < INT64_LIMIT:
        raise DiffError(f"reduce logic returned the count {c} for output {o!r}: outside int64")
    return c


class UserReduce(Logic):
    """``f(key, [(val, count), ...]) -> [(out, count), ...]`` with vals sorted."""

    def __init__(self, interner: Interner, f: Callable, **options) -> None:
        super().__init__(interner, **options)
        self.f = f

    def _chunk(self, keys, offs, vals, counts, lo: int, hi: int) -> Sparse:
        sizes = offs[lo + 1 : hi + 1] - offs[lo:hi]
        points = np.flatnonzero(sizes).tolist()
        if not points:
            return _empty()
        if len(points) != hi - lo or (sizes != 1).any():
            return super()._chunk(keys, offs, vals, counts, lo, hi)
        # every group holds one val: the groups are built in one pass and f is mapped over them
        a, b = int(offs[lo]), int(offs[hi])
        key_values = self.interner.value_list(keys[lo:hi])
        # each group list is made just before f sees it and dropped right after: no group outlives
        # its call, so the garbage collector never has to promote (and re-traverse) them
        groups = map(list, zip(zip(self.interner.value_list(vals[a:b]), counts[a:b].tolist())))
        try:
            results = list(map(self.f, key_values, groups))
        except Exception:  # once more, one call at a time, to name the group it raised on
            groups = [[(v, c)] for v, c in zip(self.interner.value_list(vals[a:b]), counts[a:b].tolist())]
            results = call_all("reduce", self.f, (key_values, groups))
        return self._collect(results, points, lo)

    def row(self, key, vals, counts):
        order = sort_values(vals)
        return call_all("reduce", self.f, ([key], [[(vals[i], counts[i]) for i in order]]))[0]


class Count(Logic):
    """``(record, multiplicity)``: one output per non-empty group."""

    def plan(self, vals):
        return TOTAL, vals, 0

    def finish(self, mode, keys, dp, dv, dc):
        return dp, self.interner.int_ids(dv), dc

    def evaluate(self, keys, offs, vals, counts):
        nonempty = np.flatnonzero(offs[1:] > offs[:-1])
        total = _totals(offs, counts)[nonempty]
        return nonempty, self.interner.int_ids(total), np.ones(len(nonempty), dtype=np.int64)


class Threshold(Logic):
    """The record itself with multiplicity ``f(record, count)``; ``distinct`` is ``count > 0 -> 1``."""

    output_is_key = True

    def __init__(self, interner: Interner, f: Callable | None = None, **options) -> None:
        super().__init__(interner, **options)
        self.f = f
        self.unit = interner.id(())
        if f is None:  # distinct: plan's answer whatever the vals
            self.traced_plan = (POSITIVE, self.unit)

    def evaluate(self, keys, offs, vals, counts):
        total = _totals(offs, counts)
        if self.f is None:
            mult = (total > 0).astype(np.int64)
        else:
            values, totals = self.interner.value_list(keys), total.tolist()
            got = call_all("threshold", self.f, ([v for v, c in zip(values, totals) if c], [c for c in totals if c]))
            got.reverse()
            mult = np.array([_int64_count(int(got.pop()), v) if c else 0 for v, c in zip(values, totals)],
                            dtype=np.int64)
        pts = np.flatnonzero(mult)
        return pts, np.full(len(pts), self.unit, dtype=np.int64), mult[pts]

    def plan(self, vals):
        if self.f is None:  # distinct: the kernel emits the record where its count is positive
            return POSITIVE, vals, self.unit
        return TOTAL, vals, 0

    def finish(self, mode, keys, dp, dv, dc):
        if mode == POSITIVE:
            return dp, dv, dc
        if self.f is None:
            mult = (dv > 0).astype(np.int64)
        else:  # f once per distinct (record, count) of the round
            pk = keys.take(dp)
            pairs = np.stack([pk, dv], axis=1)
            uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
            values = self.interner.value_list(uniq[:, 0])
            cs = uniq[:, 1].tolist()
            got = call_all("threshold", self.f, ([v for v, c in zip(values, cs) if c], [c for c in cs if c]))
            got.reverse()
            m = [_int64_count(int(got.pop()), v) if c else 0 for v, c in zip(values, cs)]
            mult = np.array(m, dtype=np.int64).take(inv.reshape(-1))
        keep = np.flatnonzero(mult)
        return dp.take(keep), np.full(len(keep), self.unit, dtype=np.int64), mult.take(keep)


class Extremum(Logic):
    """The smallest (``min``) or largest (``max``) val with positive count, multiplicity 1."""

    def __init__(self, interner: Interner, largest: bool, **options) -> None:
        super().__init__(interner, **options)
        self.largest = largest

    def evaluate(self, keys, offs, vals, counts):
        if len(vals) == 0:
            return _empty()
        uniq, inv = np.unique(vals, return_inverse=True)
        order = np.asarray(sort_values(self.interner.value_list(uniq)), dtype=np.int64)
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

    def plan(self, vals):
        order = self.value_order(vals)
        return LEAST, (-order if self.largest else order), 0

    def finish(self, mode, keys, dp, dv, dc):
        return dp, dv, dc


class Sum(Logic):
    """``sum(val * count)`` with multiplicity 1."""

    def row(self, key, vals, counts):
        return [(sum(v * c for v, c in zip(vals, counts)), 1)]

    def plan(self, vals):
        ints = self.interner.int_values(vals)
        if ints is not None:  # int values: summed in the kernel (checked)
            return SUM, ints, 0
        return GROUPS, vals, 0

    def finish(self, mode, keys, dp, dv, dc):
        if mode == SUM:
            return dp, self.interner.int_ids(dv), dc
        return super().finish(mode, keys, dp, dv, dc)


class TopK(Logic):
    """The ``k`` largest elements of the multiset of vals with positive counts."""

    def __init__(self, interner: Interner, k: int, **options) -> None:
        super().__init__(interner, **options)
        self.k = k

    def row(self, key, vals, counts):
        out = []
        left = self.k
        for i in reversed(sort_values(vals)):
            if left <= 0:
                break
            if counts[i] > 0:
                take = min(counts[i], left)
                out.append((vals[i], take))
                left -= take
        return out

    def plan(self, vals):
        return TOP, self.value_order(vals), self.k

    def finish(self, mode, keys, dp, dv, dc):
        return dp, dv, dc
