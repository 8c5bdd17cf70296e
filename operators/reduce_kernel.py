"""The vectorized reduce kernel for totally ordered times and for one loop counter (DESIGN §10).

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
"""

from __future__ import annotations

import numpy as np

from .batch import Updates
from .reductions import Logic
from .trie import ranges_to_index

Triples = tuple[np.ndarray, np.ndarray, np.ndarray]


def accumulate_at(pk: np.ndarray, pa: np.ndarray, rk: np.ndarray, rv: np.ndarray, rs: np.ndarray,
                  rd: np.ndarray) -> Triples:
    """Non-zero ``(point, val, count)``: per point ``(pk, pa)`` the rows of key ``pk`` with ``rs <= pa``
    summed per val; sorted by point, then val id."""
    e = np.empty(0, dtype=np.int64)
    if len(rk) == 0 or len(pk) == 0:
        return e, e, e
    order = np.lexsort((rs, rv, rk))
    rk, rv, rs, rd = rk[order], rv[order], rs[order], rd[order]
    new_group = np.ones(len(rk), dtype=bool)
    new_group[1:] = (rk[1:] != rk[:-1]) | (rv[1:] != rv[:-1])
    gstart = np.flatnonzero(new_group)
    gid = np.cumsum(new_group) - 1
    gkey, gval = rk[gstart], rv[gstart]
    cums = np.cumsum(rd)
    before = cums[gstart] - rd[gstart]
    uniq, inv = np.unique(np.concatenate([rs, pa]), return_inverse=True)
    width = len(uniq)
    code = gid * width + inv[: len(rs)]
    glo = np.searchsorted(gkey, pk, "left")
    ghi = np.searchsorted(gkey, pk, "right")
    pair_p = np.repeat(np.arange(len(pk), dtype=np.int64), ghi - glo)
    pair_g = ranges_to_index(glo, ghi)
    idx = np.searchsorted(code, pair_g * width + inv[len(rs):][pair_p], "right") - 1
    valid = idx >= gstart[pair_g]
    acc = np.where(valid, cums[np.maximum(idx, 0)] - before[pair_g], 0)
    nz = acc != 0
    return pair_p[nz], gval[pair_g[nz]], acc[nz]


def reduce_points(cand_keys: np.ndarray, cand_outer: np.ndarray, r: int | None, inp: Updates, out: Updates,
                  logic: Logic) -> tuple[Updates, np.ndarray, np.ndarray]:
    """Output diffs for the candidates of one round, and ``(keys, times)`` to revisit in later rounds.

    ``inp`` and ``out`` are the input and output histories of the candidate keys (``data == (key, val)``);
    ``r`` is the round's iteration at depth 2, ``None`` at depth 1.
    """
    depth = 1 if r is None else 2
    order = np.argsort(cand_keys, kind="stable")
    ck, co = cand_keys[order], cand_outer[order]
    starts = np.flatnonzero(np.concatenate([[True], ck[1:] != ck[:-1]]))
    keys = ck[starts]
    first = np.minimum.reduceat(co, starts)

    pend_k = pend_t = None
    if r is not None:
        later = np.concatenate([inp.times[:, 1] > r, out.times[:, 1] > r])
        if later.any():
            lk = np.concatenate([inp.data[0], out.data[0]])[later]
            lj = np.concatenate([inp.times[:, 1], out.times[:, 1]])[later]
            pairs = np.unique(np.stack([lk, lj], axis=1), axis=0)
            pend_k = pairs[:, 0]
            pend_t = np.stack([first[np.searchsorted(keys, pend_k)], pairs[:, 1]], axis=1)
            n_in = len(inp)
            inp = inp.take(~later[:n_in])
            out = out.take(~later[n_in:])
    if pend_k is None:
        pend_k = np.empty(0, dtype=np.int64)
        pend_t = np.empty((0, depth), dtype=np.int64)

    # the points (key, outer time) at which the output may change
    pk = np.concatenate([inp.data[0], out.data[0], ck])
    pa = np.concatenate([inp.times[:, 0], out.times[:, 0], co])
    keep = pa >= first[np.searchsorted(keys, pk)]
    pk, pa = pk[keep], pa[keep]
    o = np.lexsort((pa, pk))
    pk, pa = pk[o], pa[o]
    fresh = np.ones(len(pk), dtype=bool)
    fresh[1:] = (pk[1:] != pk[:-1]) | (pa[1:] != pa[:-1])
    pk, pa = pk[fresh], pa[fresh]
    n_points = len(pk)

    ip, iv, ic = accumulate_at(pk, pa, inp.data[0], inp.data[1], inp.times[:, 0], inp.diffs)
    offs = np.searchsorted(ip, np.arange(n_points + 1))
    dp, dout, dc = logic.evaluate(pk, offs, iv, ic)
    op, oout, oc = accumulate_at(pk, pa, out.data[0], out.data[1], out.times[:, 0], out.diffs)

    # residual = desired minus output so far, sparse over (point, out); its first difference along the
    # key's points is what to emit: +r at a point, -r at the key's next point
    rp = np.concatenate([dp, op])
    ro = np.concatenate([dout, oout])
    rv = np.concatenate([dc, -oc])
    if len(rp) == 0:
        return Updates.empty(2, depth), pend_k, pend_t
    nxt = rp + 1
    has_next = nxt < n_points
    has_next[has_next] = pk[nxt[has_next]] == pk[rp[has_next]]
    ep = np.concatenate([rp, nxt[has_next]])
    eo = np.concatenate([ro, ro[has_next]])
    ev = np.concatenate([rv, -rv[has_next]])
    order = np.lexsort((eo, ep))
    ep, eo, ev = ep[order], eo[order], ev[order]
    starts = np.ones(len(ep), dtype=bool)
    starts[1:] = (ep[1:] != ep[:-1]) | (eo[1:] != eo[:-1])
    idx = np.flatnonzero(starts)
    sums = np.add.reduceat(ev, idx)
    nz = sums != 0
    ep, eo, emit = ep[idx[nz]], eo[idx[nz]], sums[nz]
    times = pa[ep].reshape(-1, 1)
    if r is not None:
        times = np.concatenate([times, np.full((len(ep), 1), r, dtype=np.int64)], axis=1)
    return Updates((pk[ep], eo), times, emit), pend_k, pend_t
