"""The vectorized reduce kernel for totally ordered times and for one loop counter.

At depth 1 (outer nanosecond times) and at depth 2 inside a loop's round ``r``, every new time of a key
has the form ``(t, r)``; the output of key ``k`` can change only at ``(a, r)`` for the key's outer times
``a >= m_k`` (``m_k``: the key's earliest new outer time) — the joins of its new times with its history.
History at a later iteration ``j > r`` (from earlier epochs) makes ``(m_k, j)`` a time to revisit in
round ``j``. For all keys at once:

1. the input accumulated at every point ``(k, a)``: a segmented prefix sum of the key's history sorted
   by outer time, read with one ``searchsorted``;
2. the logic's desired output at each point;
3. minus the output history accumulated at the point; the first difference of that (sparse) residual
   along ``a`` is the diff to emit at ``(a, r)``.

``min`` and ``max`` skip step 1's full accumulation: a point's output is its key's first val, in value
order, with a positive count there, so each point probes its key's vals in that order and stops at
the first positive one (a few probes per point instead of one per distinct val, which made a hub with
thousands of labels cost points x labels).
"""

from __future__ import annotations

import numpy as np

from ...kernels.consolidate import SumOverflow, outside_int64, sums_fit
from ...kernels.gather import ranges_to_index
from ...kernels.sorting import EMPTY, argsort, order, ranks, starts, unique_rows
from ...traces.batch import Updates, sum_error
from ...values.ordering import sort_values
from .logic import Extremum, Logic, PointOverflow

Triples = tuple[np.ndarray, np.ndarray, np.ndarray]


def _check_prefix_sums(rk: np.ndarray, rs: np.ndarray, rd: np.ndarray, gstart: np.ndarray, gid: np.ndarray,
                       vals: np.ndarray) -> None:
    """Raise :class:`SumOverflow` ``((key, val), (time,))`` when a group's rows (sorted by time) sum
    outside int64 at the last row of some time: an accumulation the points may read. Exact, in Python
    ints; run only when :func:`sums_fit` cannot rule it out."""
    exact = np.cumsum(rd.astype(object))
    partial = exact - (exact.take(gstart) - rd.take(gstart).astype(object)).take(gid)
    last = np.ones(len(rd), dtype=bool)  # the last row of its (group, time)
    last[:-1] = (gid[1:] != gid[:-1]) | (rs[1:] != rs[:-1])
    bad = np.flatnonzero(last & outside_int64(partial))
    if len(bad):
        i = int(bad[0])
        raise SumOverflow((int(rk[i]), int(vals[i])), (int(rs[i]),))


class Histories:
    """Rows ``(key, group, time, diff)`` sorted by key, group and time and summed cumulatively, read at
    points: ``sum_at(group, point)`` is the group's sum over rows with ``time <= pa[point]``, by one
    ``searchsorted`` over ``group * width + time`` codes. Groups are a key's vals (or val ranks) in order;
    keys are small dense indices and the points' keys ``pk`` the same kind. The sums are exact: when a
    group's accumulation at some time leaves int64, construction raises :class:`SumOverflow` naming
    the key index, the val (the first ``also`` column) and the outer time."""

    def __init__(self, pa: np.ndarray, rk: np.ndarray, rg: np.ndarray, rs: np.ndarray, rd: np.ndarray,
                 *also: np.ndarray, runs: bool = False) -> None:
        o = order((rk, rg, rs), runs=runs)
        rk, rg, rs, rd = rk.take(o), rg.take(o), rs.take(o), rd.take(o)
        self.also = tuple(c.take(o) for c in also)  # more row columns, in the same order
        new_group = starts((rk, rg))
        self.gstart = np.flatnonzero(new_group)
        gid = np.cumsum(new_group) - 1
        self.gkey = rk.take(self.gstart)
        self.cums = np.cumsum(rd)  # may wrap: a group's sums are differences of two, exact mod 2**64
        self.before = self.cums.take(self.gstart) - rd.take(self.gstart)
        if not sums_fit(len(rd), rd):
            _check_prefix_sums(rk, rs, rd, self.gstart, gid, self.also[0] if also else rg)
        lo = min(int(rs.min()), int(pa.min()))
        width = max(int(rs.max()), int(pa.max())) - lo + 1
        if len(self.gstart) * width < 1 << 62:
            ts, self.tp = rs - lo, pa - lo
        else:  # times too spread to code directly: code their ranks
            uniq, inv = ranks(np.concatenate([rs, pa]))
            width = len(uniq)
            ts, self.tp = inv[: len(rs)], inv[len(rs):]
        self.width = width
        self.code = gid * width + ts

    def groups(self, pk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per point, the range ``[lo, hi)`` of its key's groups."""
        return np.searchsorted(self.gkey, pk, "left"), np.searchsorted(self.gkey, pk, "right")

    def sum_at(self, groups: np.ndarray, points: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.code, groups * self.width + self.tp.take(points), "right") - 1
        acc = self.cums.take(np.maximum(idx, 0)) - self.before.take(groups)
        acc[idx < self.gstart.take(groups)] = 0
        return acc

    def first_row(self, column: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """``column`` (one of ``also``) at each group's first row."""
        return column.take(self.gstart.take(groups))


def accumulate_at(pk: np.ndarray, pa: np.ndarray, rk: np.ndarray, rv: np.ndarray, rs: np.ndarray,
                  rd: np.ndarray) -> Triples:
    """Non-zero ``(point, val, count)``: per point ``(pk, pa)`` the rows of key ``pk`` with ``rs <= pa``
    summed per val; sorted by point, then val id. Rows come from trace lookups (one sorted run per
    batch)."""
    if len(rk) == 0 or len(pk) == 0:
        return EMPTY, EMPTY, EMPTY
    h = Histories(pa, rk, rv, rs, rd, rv, runs=True)
    glo, ghi = h.groups(pk)
    counts = ghi - glo
    if (counts <= 1).all():  # one val per key (distinct, count): no pair expansion
        pair_p = np.flatnonzero(counts)
        pair_g = glo.take(pair_p)
    else:
        pair_p = np.repeat(np.arange(len(pk), dtype=np.int64), counts)
        pair_g = ranges_to_index(glo, ghi)
    acc = h.sum_at(pair_g, pair_p)
    nz = acc != 0
    return pair_p.compress(nz), h.first_row(h.also[0], pair_g.compress(nz)), acc.compress(nz)




def value_ranks(logic: Extremum, vals: np.ndarray) -> np.ndarray:
    """Per val id, its rank in the order the extremum reads them (ascending for min, descending for max)."""
    ints = logic.interner.int_values(vals)
    if ints is not None:
        return -ints if logic.largest else ints
    uniq, inv = ranks(vals)
    order_ = np.asarray(sort_values(logic.interner.values(uniq).tolist()), dtype=np.int64)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order_] = np.arange(len(uniq)) if not logic.largest else np.arange(len(uniq))[::-1]
    return rank.take(inv)


def extremum_at(pk: np.ndarray, pa: np.ndarray, rk: np.ndarray, rv: np.ndarray, rs: np.ndarray,
                rd: np.ndarray, logic: Extremum, probes: int) -> tuple[Triples, np.ndarray]:
    """``((point, val, 1), unresolved points)``: per point the first val in the extremum's order whose
    count of rows with ``rs <= pa`` is positive, probing at most ``probes`` vals per point; points
    whose first ``probes`` vals are all non-positive are returned to be evaluated in full."""
    if len(rk) == 0 or len(pk) == 0:
        return (EMPTY, EMPTY, EMPTY), EMPTY
    h = Histories(pa, rk, value_ranks(logic, rv), rs, rd, rv)
    glo, ghi = h.groups(pk)
    live = np.flatnonzero(ghi > glo)
    cur = glo.take(live)
    found_p, found_g = [], []
    for _ in range(probes):
        if len(live) == 0:
            break
        positive = h.sum_at(cur, live) > 0
        found_p.append(live.compress(positive))
        found_g.append(cur.compress(positive))
        rest = ~positive
        cur = cur.compress(rest) + 1
        live = live.compress(rest)
        more = cur < ghi.take(live)
        cur, live = cur.compress(more), live.compress(more)
    p = np.concatenate(found_p) if found_p else EMPTY
    g = np.concatenate(found_g) if found_g else EMPTY
    return (p, h.first_row(h.also[0], g), np.ones(len(p), dtype=np.int64)), live


def evaluate_points(pk: np.ndarray, pa: np.ndarray, keys: np.ndarray, inp: Updates, ik: np.ndarray,
                    it: np.ndarray, logic: Logic, probes: int) -> Triples:
    """The logic's desired output ``(point, out, count)`` at the points ``(pk, pa)``; an extremum
    probes at most ``probes`` vals per point before accumulating the point's group in full."""
    if isinstance(logic, Extremum):
        (dp, dout, dc), rest = extremum_at(pk, pa, ik, inp.data[1], it, inp.diffs, logic, probes)
        if len(rest) == 0:
            return dp, dout, dc
        mask = np.isin(ik, pk.take(rest))
        sub = Updates((inp.data[0].compress(mask), inp.data[1].compress(mask)), inp.times.compress(mask, axis=0),
                      inp.diffs.compress(mask))
        try:
            rp, rout, rc = _evaluate_all(pk.take(rest), pa.take(rest), keys, sub, ik.compress(mask),
                                         it.compress(mask), logic)
        except PointOverflow as exc:  # name the point among all of them
            raise PointOverflow(int(rest[exc.point])) from exc
        return np.concatenate([dp, rest.take(rp)]), np.concatenate([dout, rout]), np.concatenate([dc, rc])
    return _evaluate_all(pk, pa, keys, inp, ik, it, logic)


def _evaluate_all(pk, pa, keys, inp, ik, it, logic) -> Triples:
    ip, iv, ic = accumulate_at(pk, pa, ik, inp.data[1], it, inp.diffs)
    offs = np.searchsorted(ip, np.arange(len(pk) + 1))
    return logic.evaluate(keys.take(pk), offs, iv, ic)


def reduce_points(cand_keys: np.ndarray, cand_outer: np.ndarray, r: int | None, inp: Updates, out: Updates,
                  logic: Logic, probes: int) -> tuple[Updates, np.ndarray, np.ndarray]:
    """Output diffs for the candidates of one round, and ``(keys, times)`` to revisit in later rounds.

    ``inp`` and ``out`` are the input and output histories of the candidate keys (``data == (key, val)``);
    ``r`` is the round's iteration at depth 2, ``None`` at depth 1.
    """
    depth = 1 if r is None else 2
    o = argsort(cand_keys)
    ck, co = cand_keys.take(o), cand_outer.take(o)
    kstart = np.flatnonzero(starts((ck,)))
    keys = ck[kstart]
    first = np.minimum.reduceat(co, kstart)

    pend_k, pend_t = EMPTY, np.empty((0, depth), dtype=np.int64)
    if r is not None:
        in_later, out_later = inp.times[:, 1] > r, out.times[:, 1] > r
        if in_later.any() or out_later.any():
            lk = np.concatenate([inp.data[0][in_later], out.data[0][out_later]])
            lj = np.concatenate([inp.times[in_later, 1], out.times[out_later, 1]])
            pend_k, lj = unique_rows((lk, lj))
            pend_t = np.stack([first[np.searchsorted(keys, pend_k)], lj], axis=1)
            inp = inp.take(~in_later)
            out = out.take(~out_later)

    # keys as dense indices into ``keys`` from here on
    ik = np.searchsorted(keys, inp.data[0])
    ok = np.searchsorted(keys, out.data[0])
    it, ot = inp.times[:, 0], out.times[:, 0]
    cidx = np.repeat(np.arange(len(keys), dtype=np.int64), np.diff(np.append(kstart, len(ck))))

    # the points (key, outer time) at which the output may change: the key's times from its first new one
    pk = np.concatenate([ik, ok, cidx])
    pa = np.concatenate([it, ot, co])
    keep = pa >= first[pk]
    pk, pa = unique_rows((pk.compress(keep), pa.compress(keep)))
    n_points = len(pk)

    def when(outer: int) -> tuple[int, ...]:
        return (outer,) if r is None else (outer, r)

    try:
        dp, dout, dc = evaluate_points(pk, pa, keys, inp, ik, it, logic, probes)
        op, oout, oc = accumulate_at(pk, pa, ok, out.data[1], ot, out.diffs)
    except SumOverflow as exc:  # an accumulated input or output history: (key index, val) at an outer time
        (k, v), (a,) = exc.data, exc.time
        raise sum_error((int(keys[k]), v), when(a)) from exc
    except PointOverflow as exc:  # a point's total over its vals
        raise sum_error((int(keys[pk[exc.point]]),), when(int(pa[exc.point]))) from exc

    # residual = desired minus output so far, sparse over (point, out); its first difference along the
    # key's points is what to emit: +r at a point, -r at the key's next point
    rp = np.concatenate([dp, op])
    if len(rp) == 0:
        return Updates.empty(2, depth), pend_k, pend_t
    ro = np.concatenate([dout, oout])
    exact = not sums_fit(4, dc, oc)  # an emitted diff sums at most 4 of these: else in Python ints
    rv = np.concatenate([dc, -oc]) if not exact else np.concatenate([dc.astype(object), -oc.astype(object)])
    nxt = rp + 1
    has_next = nxt < n_points
    has_next[has_next] = pk[nxt[has_next]] == pk[rp[has_next]]
    ep = np.concatenate([rp, nxt[has_next]])
    eo = np.concatenate([ro, ro[has_next]])
    ev = np.concatenate([rv, -rv[has_next]])
    o = order((ep, eo))
    ep, eo, ev = ep.take(o), eo.take(o), ev.take(o)
    idx = np.flatnonzero(starts((ep, eo)))
    sums = np.add.reduceat(ev, idx)
    if exact:
        bad = np.flatnonzero(outside_int64(sums))
        if len(bad):
            i = idx[bad[0]]
            raise sum_error((int(keys[pk[ep[i]]]), int(eo[i])), when(int(pa[ep[i]])))
        sums = sums.astype(np.int64)
    nz = sums != 0
    ep, eo, emit = ep[idx[nz]], eo[idx[nz]], sums[nz]
    times = pa[ep].reshape(-1, 1)
    if r is not None:
        times = np.concatenate([times, np.full((len(ep), 1), r, dtype=np.int64)], axis=1)
    return Updates((keys[pk[ep]], eo), times, emit), pend_k, pend_t
