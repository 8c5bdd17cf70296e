"""Output diffs of a reduction round, consolidated per key.

With ``D_i`` the desired output at a key's ``i``-th point ``p_i`` of the round (as
:func:`~ddflow.operators.kernels.reduce.reduce_points` finds them) and ``O`` the key's output
history in the round's slice, the diffs that make the output accumulate to ``D_i`` on
``[p_i, p_{i+1})`` and leave it unchanged before the key's first point are ``+D_i`` at ``p_i``,
``-D_i`` at ``p_{i+1}``, and every output row of the slice negated at ``max(time, first)``
(first differences of the residual ``D - O``). Most of those terms cancel: a point whose desired
output did not move cancels the output row written for it in an earlier round. :func:`reduce_emit`
sums them per ``(key, out, time)`` as it writes them, so what leaves a round is what changes, in the
order an output batch is built in (key, out, time), and no later pass has to sort the cancelled
terms away.
"""

from __future__ import annotations

import numpy as np

from .. import helper, kernel
from ..sorting import merge_order
from .points import _MIN, _by_key, _inside, _key_indices, _wrapping_add

OK, NO_NEGATION, SUM_OVERFLOW = 0, 1, 2


# -- compiled -----------------------------------------------------------------------------------
@helper
def _sort_terms(to, tt, td, s):
    """Sort the first ``s`` terms ``(to, tt, td)`` by ``(out, time)`` in place: an insertion sort when
    short (the terms come nearly in order: points in time order, history rows by batch), else a
    bottom-up merge sort of their indices."""
    if s <= 64:
        for i in range(1, s):
            o, t, d = to[i], tt[i], td[i]
            j = i - 1
            while j >= 0 and (to[j] > o or (to[j] == o and tt[j] > t)):
                to[j + 1], tt[j + 1], td[j + 1] = to[j], tt[j], td[j]
                j -= 1
            to[j + 1], tt[j + 1], td[j + 1] = o, t, d
        return
    terms = np.empty((s, 2), np.int64)
    for i in range(s):
        terms[i, 0], terms[i, 1] = to[i], tt[i]
    idx = merge_order(terms)
    a, b, c = to[:s].copy(), tt[:s].copy(), td[:s].copy()
    for i in range(s):
        to[i], tt[i], td[i] = a[idx[i]], b[idx[i]], c[idx[i]]


@kernel
def reduce_emit(keys, first, pk, pa, dp, dv, dc, out_k, out_v, out_t, out_d, inner):
    """Output diffs of one round, consolidated: ``(key, out, time, diff)`` columns sorted by key, out
    and time, distinct, no zero diff, each time a row ``(outer, *inner)`` of an ``(e, depth)`` array.

    Entry: ``keys``, ``first``, the points ``(pk, pa)`` and the desired triples ``(dp, dv, dc)`` as
    :func:`~ddflow.operators.kernels.reduce.reduce_points` returned them (``dv`` now out ids); the
    output rows ``(out_k, out_v, out_t, out_d)`` of the round's keys, in any order; ``inner`` the
    round's inner coordinates.

    Returns ``(key, out, time, diff, status)``. ``status`` is ``OK``, or: ``NO_NEGATION`` (a desired
    count or an output diff of ``-2**63``, which has no negation in int64) or ``SUM_OVERFLOW`` (the
    terms of one ``(key, out, time)`` sum outside int64); then the last row returned names the
    ``(key, out, time)`` concerned (its diff is meaningless)."""
    n, n_pts, q = dp.shape[0], pk.shape[0], out_k.shape[0]
    nk = keys.shape[0]
    depth = out_t.shape[1]
    size = 2 * n + q
    ek = np.empty(size, np.int64)
    eo = np.empty(size, np.int64)
    et = np.empty(size, np.int64)
    ed = np.empty(size, np.int64)
    # the slice's output rows, grouped by key
    ok = _key_indices(keys, out_k)
    sel = np.empty(q, np.int64)
    m = 0
    for j in range(q):
        if _inside(out_t, j, inner):
            sel[m] = j
            m += 1
    rows, r_off = _by_key(ok, sel[:m], nk)
    # per key: its terms into a scratch run, ordered by (out, time), summed where equal
    to = np.empty(size, np.int64)
    tt = np.empty(size, np.int64)
    td = np.empty(size, np.int64)
    status = OK
    e = 0
    i = 0
    for kx in range(nk):
        key = keys[kx]
        s = 0
        while i < n and pk[dp[i]] == kx:
            p = dp[i]
            to[s], tt[s], td[s] = dv[i], pa[p], dc[i]
            s += 1
            if p + 1 < n_pts and pk[p + 1] == kx:
                if dc[i] == _MIN:
                    status = NO_NEGATION
                to[s], tt[s], td[s] = dv[i], pa[p + 1], -dc[i] if dc[i] != _MIN else 0
                s += 1
            i += 1
            if status != OK:
                break
        for r in range(r_off[kx], r_off[kx + 1]):
            if status != OK:
                break
            j = rows[r]
            if out_d[j] == _MIN:
                status = NO_NEGATION
            to[s], tt[s], td[s] = out_v[j], max(out_t[j, 0], first[kx]), -out_d[j] if out_d[j] != _MIN else 0
            s += 1
        if status != OK:  # name the term that cannot be negated
            ek[e], eo[e], et[e], ed[e] = key, to[s - 1], tt[s - 1], 0
            e += 1
            break
        _sort_terms(to, tt, td, s)
        g = 0
        while g < s:
            total, carries = td[g], 0
            h = g + 1
            while h < s and to[h] == to[g] and tt[h] == tt[g]:
                total, carry = _wrapping_add(total, td[h])
                carries += carry
                h += 1
            if carries != 0:
                status = SUM_OVERFLOW
                ek[e], eo[e], et[e], ed[e] = key, to[g], tt[g], 0
                e += 1
                break
            if total != 0:
                ek[e], eo[e], et[e], ed[e] = key, to[g], tt[g], total
                e += 1
            g = h
        if status != OK:
            break
    times = np.empty((e, depth), np.int64)
    for r in range(e):
        times[r, 0] = et[r]
        for c in range(1, depth):
            times[r, c] = inner[c - 1]
    return ek[:e], eo[:e], times, ed[:e], status


# -- reference ----------------------------------------------------------------------------------
def _le_inner(row, inner) -> bool:
    return all(x <= y for x, y in zip(row[1:], inner))


def reduce_emit_reference(keys, first, pk, pa, dp, dv, dc, out_k, out_v, out_t, out_d, inner):
    """:func:`reduce_emit` from the residual's definition: at the key's ``i``-th point,
    ``R_i - R_{i-1}`` where ``R_i`` is the desired output minus the output accumulated at ``p_i``
    (``R_{-1} = 0``). Returns ``{(key, out, outer time): diff}`` without zeros (sums exact: Python
    ints, which the kernel must refuse when outside int64)."""
    inner = inner.tolist()
    desired: dict[int, dict[int, int]] = {}
    for p, v, c in zip(dp.tolist(), dv.tolist(), dc.tolist()):
        desired.setdefault(p, {})
        desired[p][v] = desired[p].get(v, 0) + c
    out_rows = [(key, v, t, d) for key, v, t, d in zip(out_k.tolist(), out_v.tolist(), out_t.tolist(),
                                                        out_d.tolist()) if _le_inner(t, inner)]
    result: dict[tuple[int, int, int], int] = {}
    previous: dict[int, int] = {}
    for p, (key_i, a) in enumerate(zip(pk.tolist(), pa.tolist())):
        key = int(keys[key_i])
        if p == 0 or pk[p - 1] != key_i:
            previous = {}
        residual = dict(desired.get(p, {}))
        for rk, v, t, d in out_rows:
            if rk == key and t[0] <= a:
                residual[v] = residual.get(v, 0) - d
        for v in set(residual) | set(previous):
            diff = residual.get(v, 0) - previous.get(v, 0)
            if diff:
                result[(key, v, a)] = diff
        previous = residual
    return result

