"""Reduction rounds: every newly complete point of every key of one round, evaluated in one pass.

A *round* is a set of candidate updates whose times share every coordinate but the outer one:
``(t, c)`` with ``c`` the round's inner coordinates (``c`` is empty outside loops). For a key whose
earliest candidate outer time is ``first``, the output can change in the round's slice only at the
points ``(a, c)`` where ``a >= first`` is the outer time of a candidate or of a history row (input or
output) whose inner coordinates are ``<= c``: the joins of new times with existing ones. The input
accumulated at ``(a, c)`` is the sum of the key's input rows with outer time ``<= a`` and inner
coordinates ``<= c``. History rows whose inner coordinates are not ``<= c`` join the new times at
later inner coordinates: they are returned as times ``(first, c ∨ j)`` to revisit.

:func:`reduce_points` accumulates the histories along each key's points (a segmented prefix sum per
``(key, val)`` *slot*) and evaluates one of the built-in logics at every point, giving the desired
output as sparse triples ``(point, out, count)``;
:func:`~ddflow.operators.kernels.reduce.diffs.reduce_emit` turns them into output diffs.

With two coordinates (one loop), the inner coordinate is totally ordered, and one time to revisit
per key is enough: the least ``(first, j)``. When that round comes, every time this round would
have asked for is a point again (each candidate's outer time is that of an input row of the key
inside the round's slice), and history rows further out ask for their own rounds then.

Modes of :func:`reduce_points` (the ``out`` of a triple, per point with a non-empty group):

* ``GROUPS``: every slot with a non-zero count, in slot order: ``(point, val, count)`` — the group
  handed to logic written in Python.
* ``TOTAL``: ``(point, total count, 1)`` (count, threshold).
* ``POSITIVE``: ``(point, k, 1)`` where the total count is positive (distinct: ``k`` the id of its
  one output).
* ``LEAST``: ``(point, val, 1)`` for the first slot with a positive count (min; max with the order
  column negated).
* ``TOP``: the ``k`` last elements, in slot order, of the multiset of vals with positive counts:
  ``(point, val, taken)``.
* ``SUM``: ``(point, sum of order * count, 1)``, the order column holding the vals' int values.

Slots are a key's distinct vals ordered by the ``order`` column (an int per val that orders the vals
as the logic needs; the val id itself when order does not matter). Distinct vals must have distinct
orders: rows of equal order are one slot. Counts and totals are summed
exactly (modulo 2**64 with the wraps counted): an accumulation at a point beyond int64 sets status
``DIFF_OVERFLOW``. ``SUM`` adds ``order * diff`` row by row and sets ``VALUE_OVERFLOW`` when a term
or a partial sum leaves int64, even if the sum at the point would fit: the caller then sums exactly
in Python.
"""

from __future__ import annotations

import numpy as np

from .. import helper, kernel
from ..join import checked_mul
from ..sorting import merge_order

GROUPS, TOTAL, LEAST, TOP, SUM, POSITIVE = 0, 1, 2, 3, 4, 5
OK, DIFF_OVERFLOW, VALUE_OVERFLOW = 0, 1, 2
DIRECT_MIN = 32  # ids up to this many are searched (no table to fill)
DIRECT_SPAN = 4  # a table of key positions when the keys' range is at most this many times the rows
_MAX = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min


# -- compiled -----------------------------------------------------------------------------------
@helper
def _checked_add(a, b):
    """``(a + b, overflowed)``, decided before adding (compiled integer arithmetic must not wrap)."""
    if (b > 0 and a > _MAX - b) or (b < 0 and a < _MIN - b):
        return 0, True
    return a + b, False


@helper
def _wrapping_add(a, b):
    """``(a + b modulo 2**64 as int64, carry)``: carry ``1`` when the sum passed ``2**63 - 1``, ``-1``
    when it passed ``-2**63``, else ``0`` (computed without overflowing)."""
    if b > 0 and a > _MAX - b:
        return (a + _MIN) + (b + _MIN), 1
    if b < 0 and a < _MIN - b:
        return (a - _MIN) + (b - _MIN), -1
    return a + b, 0


@helper
def _gather(a, index):
    """``a[index]`` (a loop compiles in a fraction of the time fancy indexing takes)."""
    out = np.empty(index.shape[0], np.int64)
    for i in range(index.shape[0]):
        out[i] = a[index[i]]
    return out


@helper
def _find(keys, x):
    """The index of the first of the sorted ``keys`` that is ``>= x``."""
    lo, hi = 0, keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@helper
def _key_indices(keys, ids):
    """Per id its index in the sorted distinct ``keys`` (every id must be one of them). Where the
    keys span a range of ids not much larger than the rows (ids are dense interner indexes), through
    a table over that range: one read per id, in any order; else :func:`_key_indices_searched`."""
    nk, n = keys.shape[0], ids.shape[0]
    if nk == 0 or n <= DIRECT_MIN:
        return _key_indices_searched(keys, ids)
    lo = keys[0]
    if lo < 0 or keys[nk - 1] - lo >= DIRECT_SPAN * (n + nk):  # (lo >= 0: no overflow)
        return _key_indices_searched(keys, ids)
    span = keys[nk - 1] - lo + 1
    where = np.empty(span, np.int64)
    for i in range(nk):
        where[keys[i] - lo] = i
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = where[ids[i] - lo]
    return out


@helper
def _key_indices_searched(keys, ids):
    """:func:`_key_indices` by a binary search only where the id differs from the previous one (ids
    in key runs cost one compare; ids in random order a search each)."""
    out = np.empty(ids.shape[0], np.int64)
    last = -1
    for i in range(ids.shape[0]):
        if last < 0 or keys[last] != ids[i]:
            last = _find(keys, ids[i])
        out[i] = last
    return out


@helper
def _by_key(kidx, perm, nk):
    """``perm`` stably reordered by ``kidx[perm]`` (keys ``0..nk-1``), and per key the offsets of
    its run: ``[offs[k], offs[k + 1])``. A ``perm`` already in key order is copied as it is."""
    offs = np.zeros(nk + 1, np.int64)
    grouped = True  # already in key order (rows from a trace lookup are): no scatter needed
    last = -1
    for i in perm:
        k = kidx[i]
        offs[k + 1] += 1
        if k < last:
            grouped = False
        last = k
    for k in range(nk):
        offs[k + 1] += offs[k]
    if grouped:
        return perm.copy(), offs
    pos = np.empty(nk, np.int64)
    for k in range(nk):
        pos[k] = offs[k]
    out = np.empty(perm.shape[0], np.int64)
    for i in perm:
        k = kidx[i]
        out[pos[k]] = i
        pos[k] += 1
    return out, offs


@helper
def _sorted_by_key(kidx, idx, values, nk):
    """The indices ``idx`` grouped by key ``kidx[i]`` (keys ``0..nk-1``, a counting sort) and within a
    key ordered by ``values[i]`` (ties in any order), and per key the offsets of its run:
    ``[offs[k], offs[k + 1])``. Runs are sorted one by one (insertion sort when short), so the cost
    is that of many small sorts, not of one sort of everything."""
    out, offs = _by_key(kidx, idx, nk)
    for k in range(nk):
        _sort_run(out, offs[k], offs[k + 1], values)
    return out, offs


@helper
def _sort_run(out, lo, hi, values):
    """Sort ``out[lo:hi]`` by ``values`` (ties in any order), in place: an insertion sort when short,
    else a merge sort."""
    if hi - lo <= 64:
        for i in range(lo + 1, hi):
            x = out[i]
            v = values[x]
            j = i - 1
            while j >= lo and values[out[j]] > v:
                out[j + 1] = out[j]
                j -= 1
            out[j + 1] = x
    else:
        run = out[lo:hi].copy()
        order = merge_order(_gather(values, run).reshape(hi - lo, 1))
        for i in range(hi - lo):
            out[lo + i] = run[order[i]]


@helper
def _time_order(kidx, idx, values, nk):
    """As :func:`_sorted_by_key`, but rows whose value is ``_MIN`` (a key's history before its first
    point, applied together in any order) come first in their key's run, unsorted, and only the
    others are sorted."""
    out, offs = _by_key(kidx, idx, nk)
    buf = np.empty(out.shape[0], np.int64)
    for k in range(nk):
        lo, hi = offs[k], offs[k + 1]
        if hi - lo <= 64:  # short: sorted as it is (_MIN sorts first)
            _sort_run(out, lo, hi, values)
            continue
        w = lo
        for i in range(lo, hi):
            if values[out[i]] == _MIN:
                buf[w] = out[i]
                w += 1
        t = w
        for i in range(lo, hi):
            if values[out[i]] != _MIN:
                buf[t] = out[i]
                t += 1
        for i in range(lo, hi):
            out[i] = buf[i]
        _sort_run(out, w, hi, values)
    return out, offs


@helper
def _inside(times, j, inner):
    for c in range(1, times.shape[1]):
        if times[j, c] > inner[c - 1]:
            return False
    return True


@kernel
def reduce_points(keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_t, inner, mode, k):
    """Desired outputs at every point of one round.

    Entry: ``keys`` sorted distinct key ids, holding every key of ``cand_k``, ``in_k`` and ``out_k``;
    candidates ``(cand_k, cand_t)`` (outer times) in any order; input rows ``(in_k, in_v, in_t,
    in_d)`` with ``in_o`` their vals' order column and output rows ``(out_k, out_t)``, in any order,
    times ``(rows, depth)``; ``inner`` the round's ``depth - 1`` inner coordinates; ``mode`` and ``k``
    (``TOP``'s count, ``POSITIVE``'s output) as in the module docstring.

    Returns ``(first, pk, pa, dp, dv, dc, pend_k, pend_t, status, at)``: per key its earliest
    candidate outer time; the points ``(pk, pa)`` (key index, outer time) sorted by key, then time; the
    desired output triples ``(dp, dv, dc)`` sorted by point (then slot); the times ``pend_t``
    (``(n, depth)``, repeats possible) at which keys ``pend_k`` (ids) must be revisited; a status; and
    with ``DIFF_OVERFLOW`` the point whose accumulation leaves int64 (the triples are then empty).
    """
    nk = keys.shape[0]
    depth = in_t.shape[1]
    m, q = in_k.shape[0], out_k.shape[0]
    status = OK
    first = np.full(nk, _MAX, np.int64)
    ck = _key_indices(keys, cand_k)
    for i in range(ck.shape[0]):
        if cand_t[i] < first[ck[i]]:
            first[ck[i]] = cand_t[i]
    ik = _key_indices(keys, in_k)
    ok = _key_indices(keys, out_k)

    # rows inside the round's slice; the others are times to revisit
    in_in = np.empty(m, np.bool_)
    out_in = np.empty(q, np.bool_)
    n_pend = 0
    for j in range(m):
        in_in[j] = _inside(in_t, j, inner)
        n_pend += not in_in[j]
    for j in range(q):
        out_in[j] = _inside(out_t, j, inner)
        n_pend += not out_in[j]
    if depth == 2 and n_pend:  # one time per key: the least inner coordinate beyond the round's
        least = np.full(nk, _MAX, np.int64)
        for j in range(m):
            if not in_in[j] and in_t[j, 1] < least[ik[j]]:
                least[ik[j]] = in_t[j, 1]
        for j in range(q):
            if not out_in[j] and out_t[j, 1] < least[ok[j]]:
                least[ok[j]] = out_t[j, 1]
        n_pend = 0
        for key in range(nk):
            n_pend += least[key] != _MAX
        pend_k = np.empty(n_pend, np.int64)
        pend_t = np.empty((n_pend, depth), np.int64)
        n = 0
        for key in range(nk):
            if least[key] != _MAX:
                pend_k[n], pend_t[n, 0], pend_t[n, 1] = keys[key], first[key], least[key]
                n += 1
        per_row = False  # the rows below add nothing more
    else:
        pend_k = np.empty(n_pend, np.int64)
        pend_t = np.empty((n_pend, depth), np.int64)
        per_row = True
    n = 0
    for j in range(m if per_row else 0):
        if not in_in[j]:
            pend_k[n] = in_k[j]
            pend_t[n, 0] = first[ik[j]]
            for c in range(1, depth):
                pend_t[n, c] = max(in_t[j, c], inner[c - 1])
            n += 1
    for j in range(q if per_row else 0):
        if not out_in[j]:
            pend_k[n] = out_k[j]
            pend_t[n, 0] = first[ok[j]]
            for c in range(1, depth):
                pend_t[n, c] = max(out_t[j, c], inner[c - 1])
            n += 1

    # points: candidate times and the slice's history times from the key's first candidate on
    tot = ck.shape[0] + m + q
    xk = np.empty(tot, np.int64)
    xt = np.empty(tot, np.int64)
    n = 0
    for i in range(ck.shape[0]):
        xk[n], xt[n] = ck[i], cand_t[i]
        n += 1
    for j in range(m):
        if in_in[j] and in_t[j, 0] >= first[ik[j]]:
            xk[n], xt[n] = ik[j], in_t[j, 0]
            n += 1
    for j in range(q):
        if out_in[j] and out_t[j, 0] >= first[ok[j]]:
            xk[n], xt[n] = ok[j], out_t[j, 0]
            n += 1
    xk, xt = xk[:n], xt[:n]
    o, _ = _sorted_by_key(xk, np.arange(n), xt, nk)
    pk = np.empty(n, np.int64)
    pa = np.empty(n, np.int64)
    p_off = np.zeros(nk + 1, np.int64)
    n_pts = 0
    for i in o:
        if n_pts == 0 or xk[i] != pk[n_pts - 1] or xt[i] != pa[n_pts - 1]:
            pk[n_pts], pa[n_pts] = xk[i], xt[i]
            p_off[xk[i] + 1] += 1
            n_pts += 1
    pk, pa = pk[:n_pts], pa[:n_pts]
    for key in range(nk):
        p_off[key + 1] += p_off[key]

    # slots: a key's distinct vals in order; rows in slot order, then in time order
    sel = np.empty(m, np.int64)
    n = 0
    for j in range(m):
        if in_in[j]:
            sel[n] = j
            n += 1
    sel = sel[:n]
    by_order, _ = _sorted_by_key(ik, sel, in_o, nk)
    row_slot = np.empty(m, np.int64)
    slot_val = np.empty(sel.shape[0], np.int64)
    slot_ord = np.empty(sel.shape[0], np.int64)
    s_off = np.zeros(nk + 1, np.int64)
    n_slots = 0
    s_key = -1
    for j in by_order:
        if s_key != ik[j] or slot_ord[n_slots - 1] != in_o[j]:
            s_key = ik[j]
            slot_val[n_slots] = in_v[j]
            slot_ord[n_slots] = in_o[j]
            s_off[s_key + 1] += 1
            n_slots += 1
        row_slot[j] = n_slots - 1
    for key in range(nk):
        s_off[key + 1] += s_off[key]
    tcol = np.empty(m, np.int64)  # rows before the key's first point are applied first, unordered
    for j in range(m):
        tcol[j] = in_t[j, 0] if in_t[j, 0] >= first[ik[j]] else _MIN
    by_time, r_off = _time_order(ik, sel, tcol, nk)

    # the sweep: each key's rows applied in time order, the logic read at each of its points
    cnt = np.zeros(n_slots, np.int64)  # per slot its count modulo 2**64, and how often it wrapped:
    wraps = np.zeros(n_slots, np.int64)  # sums are exact, only counts at points must fit int64
    # the triples' room, allocated once: at most one per point, a slot per point for GROUPS, k for
    # TOP (arrays grown inside the sweep would make every row of it pay reference counting)
    room = 0
    for key in range(nk):
        per = 1
        if mode == GROUPS:
            per = s_off[key + 1] - s_off[key]
        elif mode == TOP:
            per = min(k, s_off[key + 1] - s_off[key])
        room += per * (p_off[key + 1] - p_off[key])
    dp = np.empty(room, np.int64)
    dv = np.empty(room, np.int64)
    dc = np.empty(room, np.int64)
    nd = 0
    for key in range(nk):
        lo, hi = s_off[key], s_off[key + 1]
        r, r_end = r_off[key], r_off[key + 1]
        total = 0
        total_wraps = 0
        wrapped = 0  # slots of the key whose count is beyond int64
        value = 0
        nonzero = 0
        best = hi
        for p in range(p_off[key], p_off[key + 1]):
            a = pa[p]
            while r < r_end and in_t[by_time[r], 0] <= a:
                j = by_time[r]
                s = row_slot[j]
                d = in_d[j]
                old, old_wraps = cnt[s], wraps[s]
                new, carry = _wrapping_add(old, d)
                cnt[s] = new
                if carry != 0:
                    wraps[s] += carry
                    wrapped += int(wraps[s] != 0) - int(old_wraps != 0)
                nonzero += int(new != 0 or wraps[s] != 0) - int(old != 0 or old_wraps != 0)
                if mode == TOTAL or mode == POSITIVE:
                    total, carry = _wrapping_add(total, d)
                    total_wraps += carry
                elif mode == SUM:
                    prod, bad = checked_mul(slot_ord[s], d)
                    value, bad2 = _checked_add(value, prod)
                    if (bad or bad2) and status == OK:
                        status = VALUE_OVERFLOW
                elif mode == LEAST:
                    if new > 0 and s < best:
                        best = s
                    elif s == best and new <= 0:
                        best = s + 1
                        while best < hi and cnt[best] <= 0:
                            best += 1
                r += 1
            if wrapped != 0 or total_wraps != 0:
                return first, pk, pa, dp[:0], dv[:0], dc[:0], pend_k, pend_t, DIFF_OVERFLOW, p
            if mode == GROUPS:
                for s in range(lo, hi):
                    if cnt[s] != 0:
                        dp[nd], dv[nd], dc[nd] = p, slot_val[s], cnt[s]
                        nd += 1
            elif mode == TOP:
                left = k
                s = hi - 1
                while s >= lo and left > 0:
                    if cnt[s] > 0:
                        take = min(cnt[s], left)
                        dp[nd], dv[nd], dc[nd] = p, slot_val[s], take
                        nd += 1
                        left -= take
                    s -= 1
            elif mode == POSITIVE:
                if total > 0:
                    dp[nd], dv[nd], dc[nd] = p, k, 1
                    nd += 1
            elif (best < hi) if mode == LEAST else (nonzero > 0):
                dp[nd], dc[nd] = p, 1
                dv[nd] = slot_val[best] if mode == LEAST else total if mode == TOTAL else value
                nd += 1
    if mode == TOP:  # each point's triples were found from the top: put them in slot order
        i = 0
        while i < nd:
            e = i
            while e < nd and dp[e] == dp[i]:
                e += 1
            lo, hi = i, e - 1
            while lo < hi:
                dv[lo], dv[hi] = dv[hi], dv[lo]
                dc[lo], dc[hi] = dc[hi], dc[lo]
                lo += 1
                hi -= 1
            i = e
    return first, pk, pa, dp[:nd], dv[:nd], dc[:nd], pend_k, pend_t, status, -1


# -- reference ----------------------------------------------------------------------------------
def _le_inner(row, inner) -> bool:
    return all(x <= y for x, y in zip(row[1:], inner))


def reduce_points_reference(keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_t, inner, mode, k):
    """:func:`reduce_points` from its definition, point by point, for clarity. Returns the same tuple
    with the pending times deduplicated and sorted (the kernel may repeat them), and triples for every
    point (the kernel stops at the first point that overflows)."""
    keys, inner = keys.tolist(), inner.tolist()
    index = {key: i for i, key in enumerate(keys)}
    first = [None] * len(keys)
    for key, t in zip(cand_k.tolist(), cand_t.tolist()):
        i = index[key]
        first[i] = t if first[i] is None else min(first[i], t)
    rows = [(index[key], v, o, t, d) for key, v, o, t, d in zip(in_k.tolist(), in_v.tolist(), in_o.tolist(),
                                                                 in_t.tolist(), in_d.tolist())]
    outs = [(index[key], t) for key, t in zip(out_k.tolist(), out_t.tolist())]
    pending = set()
    for key_i, t in [(r[0], r[3]) for r in rows] + outs:
        if not _le_inner(t, inner):
            pending.add((keys[key_i], (first[key_i], *(max(a, b) for a, b in zip(t[1:], inner)))))
    if len(inner) == 1:  # one loop: only the least time per key
        least: dict[int, tuple[int, ...]] = {}
        for key, t in pending:
            least[key] = min(least.get(key, t), t)
        pending = set(least.items())
    points = set()
    for key, t in zip(cand_k.tolist(), cand_t.tolist()):
        points.add((index[key], t))
    for key_i, t in [(r[0], r[3]) for r in rows] + outs:
        if _le_inner(t, inner) and t[0] >= first[key_i]:
            points.add((key_i, t[0]))
    points = sorted(points)
    triples = []
    status, first_bad = OK, -1
    for p, (key_i, a) in enumerate(points):
        counts: dict[tuple[int, int], int] = {}  # (order, val) -> count
        for rk, v, o, t, d in rows:
            if rk == key_i and t[0] <= a and _le_inner(t, inner):
                counts[(o, v)] = counts.get((o, v), 0) + d
        total = sum(counts.values())
        if any(not _MIN <= c <= _MAX for c in counts.values()) or (
                mode in (TOTAL, POSITIVE) and not _MIN <= total <= _MAX):
            status, first_bad = DIFF_OVERFLOW, (p if first_bad < 0 else first_bad)
            counts = {ov: 0 for ov in counts}
        group = sorted(counts.items())
        nonempty = any(c for _, c in group)
        if mode == GROUPS:
            triples += [(p, v, c) for (_, v), c in group if c]
        elif mode == TOTAL and nonempty:
            triples.append((p, sum(c for _, c in group), 1))
        elif mode == POSITIVE and nonempty:
            if sum(c for _, c in group) > 0:
                triples.append((p, k, 1))
        elif mode == SUM and nonempty:
            value = sum(o * c for (o, _), c in group)
            if not _MIN <= value <= _MAX:
                status, value = (VALUE_OVERFLOW if status == OK else status), 0
            triples.append((p, value, 1))
        elif mode == LEAST:
            positive = [v for (_, v), c in group if c > 0]
            if positive:
                triples.append((p, positive[0], 1))
        elif mode == TOP:
            taken, left = [], k
            for (_, v), c in reversed(group):
                if left and c > 0:
                    taken.append((p, v, min(c, left)))
                    left -= min(c, left)
            triples += reversed(taken)
    pend = sorted(pending)
    depth = in_t.shape[1]
    col = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    return (col([_MAX if f is None else f for f in first]), col([p[0] for p in points]),
            col([p[1] for p in points]), col([t[0] for t in triples]), col([t[1] for t in triples]),
            col([t[2] for t in triples]), col([p[0] for p in pend]),
            col([p[1] for p in pend]).reshape(len(pend), depth), status, first_bad)
