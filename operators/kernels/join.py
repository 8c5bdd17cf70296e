"""Join kernels: every pair of two key-sorted batches of updates with equal keys, in one pass.

A join's output for updates ``a`` and ``b`` (flat rows ``(key, val, time, diff)``, each sorted by key:
a batch of changes, and the rows a trace lookup returned for its keys) is, for every pair of rows
under the same key, ``(key, a's val, b's val, join of the times, product of the diffs)``.
:func:`join_sorted` walks the two sides' key runs together, galloping through the longer side for
the next key of the other (a few probes when one side is small, one linear pass when both are
large), and builds the output columns in a second pass, their length counted in the first. Products
are checked: the kernel returns the index of the first one beyond int64 (the caller raises).
:func:`join_traced` looks a batch of changes' keys up in a trace (its batch table) and pairs them with
what it finds in the same call: the trace's rows never become Python objects.
"""

from __future__ import annotations

import numpy as np

from . import helper, kernel
from .lookup import lookup, lookup_reference

_MAX = np.iinfo(np.int64).max
_MIN = np.iinfo(np.int64).min


@helper
def _gallop(keys, x, lo):
    """The index of the first of the sorted ``keys[lo:]`` that is ``>= x``."""
    n = keys.shape[0]
    if lo >= n or keys[lo] >= x:
        return lo
    step = 1
    while lo + step < n and keys[lo + step] < x:
        lo += step
        step *= 2
    hi = min(lo + step, n)
    lo += 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@helper
def checked_mul(a, b):
    """``(a * b, overflowed)``, decided by divisions before multiplying (the join's products and the
    reduction's weighted sums both check with it)."""
    if a == 0 or b == 0:
        return 0, False
    if a < 0 and b < 0:
        if a == _MIN or b == _MIN or -a > _MAX // -b:
            return 0, True
    elif a < 0 or b < 0:
        neg, pos = (a, b) if a < 0 else (b, a)
        if neg < _MIN // pos + (1 if _MIN % pos else 0):  # below ceil(MIN / pos)
            return 0, True
    elif a > _MAX // b:
        return 0, True
    return a * b, False


@helper
def _product(a, b, sign):
    """``(a * b * sign, overflowed)`` for ``sign`` in ``{1, -1}``."""
    if sign > 0:
        return checked_mul(a, b)
    if b != _MIN:
        return checked_mul(a, -b)
    if a != _MIN:
        return checked_mul(-a, b)
    return 0, True


@helper
def _next_match(ak, bk, i, j):
    """From positions ``i`` of ``ak`` and ``j`` of ``bk`` (both sorted), the first ``(i, j)`` with
    ``ak[i] == bk[j]``, or ends."""
    na, nb = ak.shape[0], bk.shape[0]
    while i < na and j < nb:
        if ak[i] < bk[j]:
            i = _gallop(ak, bk[j], i)
        elif bk[j] < ak[i]:
            j = _gallop(bk, ak[i], j)
        else:
            return i, j
    return na, nb


@helper
def _run_end(keys, i):
    """The end of the run of ``keys[i]`` (galloping: long runs cost a few probes)."""
    return _gallop(keys, keys[i] + 1, i) if keys[i] < _MAX else keys.shape[0]


@kernel
def join_sorted(ak, av, at, ad, bk, bv, bt, bd, sign):
    """Pairs of rows of ``a = (ak, av, at, ad)`` and ``b = (bk, bv, bt, bd)`` (each sorted by key, times
    ``(n, depth)`` of one depth) under equal keys.

    Returns ``(key, a val, b val, time, diff, bad)``: columns whose time is the coordinate-wise max of
    the two times and diff ``sign`` (``1`` or ``-1``) times the product of the two diffs, rows by key
    and within a key by ``b`` row, then ``a`` row; and ``bad``, the first row whose diff is outside
    int64 (its diff then 0), or ``-1``."""
    depth = at.shape[1]
    total = 0
    i, j = _next_match(ak, bk, 0, 0)
    while i < ak.shape[0]:
        ie, je = _run_end(ak, i), _run_end(bk, j)
        total += (ie - i) * (je - j)
        i, j = _next_match(ak, bk, ie, je)
    ok = np.empty(total, np.int64)
    oa = np.empty(total, np.int64)
    ob = np.empty(total, np.int64)
    ot = np.empty((total, depth), np.int64)
    od = np.empty(total, np.int64)
    bad = -1
    e = 0
    i, j = _next_match(ak, bk, 0, 0)
    while i < ak.shape[0]:
        ie, je = _run_end(ak, i), _run_end(bk, j)
        for y in range(j, je):
            for x in range(i, ie):
                ok[e], oa[e], ob[e] = ak[x], av[x], bv[y]
                for c in range(depth):
                    ot[e, c] = max(at[x, c], bt[y, c])
                od[e], outside = _product(ad[x], bd[y], sign)
                if outside and bad < 0:
                    bad = e
                e += 1
        i, j = _next_match(ak, bk, ie, je)
    return ok, oa, ob, ot, od, bad


@kernel
def join_traced(ck, cv, ct, cd, table, changes_first):
    """:func:`join_sorted` of changes ``(ck, cv, ct, cd)`` (sorted by key) and the rows of a trace
    under their keys (the trace's batch table, rows ``(address, nk, nv, n)``, of ``ct``'s depth, as
    :func:`~ddflow.operators.kernels.lookup.lookup` takes it): the changes as ``a`` and the trace's
    rows as ``b`` when ``changes_first``, else the other way round; ``sign`` 1.

    Returns ``(out, n, bad)``: :func:`join_sorted`'s ``n`` rows as the columns of one array (one
    array to hand back instead of five): keys ``out[:n]``, ``a`` vals ``out[n:2n]``, ``b`` vals
    ``out[2n:3n]``, diffs ``out[3n:4n]``, times ``out[4n:]`` (row-major ``(n, depth)``); ``bad`` as
    :func:`join_sorted` returns it."""
    depth = ct.shape[1]
    tk, tv, tt, td = lookup(ck, table, depth)
    if changes_first:
        k, va, vb, t, d, bad = join_sorted(ck, cv, ct, cd, tk, tv, tt, td, 1)
    else:
        k, va, vb, t, d, bad = join_sorted(tk, tv, tt, td, ck, cv, ct, cd, 1)
    n = k.shape[0]
    out = np.empty(n * (4 + depth), np.int64)
    for i in range(n):
        out[i], out[n + i], out[2 * n + i], out[3 * n + i] = k[i], va[i], vb[i], d[i]
        for c in range(depth):
            out[4 * n + i * depth + c] = t[i, c]
    return out, n, bad


# -- reference ----------------------------------------------------------------------------------
def join_sorted_reference(ak, av, at, ad, bk, bv, bt, bd, sign):
    """:func:`join_sorted` by its definition: every pair of rows compared. Returns the output rows as
    a sorted list of ``(key, a val, b val, time tuple, diff)`` and whether a diff was beyond int64
    (such rows are left out)."""
    entries = list(zip(bk.tolist(), bv.tolist(), map(tuple, bt.tolist()), bd.tolist()))
    out, outside = [], False
    for key, val, t, d in zip(ak.tolist(), av.tolist(), at.tolist(), ad.tolist()):
        for bkey, bval, bt_, bd_ in entries:
            if bkey == key:
                diff = d * bd_ * sign
                if not _MIN <= diff <= _MAX:
                    outside = True
                    continue
                out.append((key, val, bval, tuple(max(x, y) for x, y in zip(t, bt_)), diff))
    return sorted(out), outside


def join_traced_reference(ck, cv, ct, cd, batches, changes_first):
    """:func:`join_traced` by the references: :func:`join_sorted_reference` of the changes and the rows
    :func:`~ddflow.operators.kernels.lookup.lookup_reference` finds in ``batches`` (flat ``(keys, vals,
    times, diffs)`` per batch)."""
    tk, tv, tt, td = lookup_reference(ck, batches)
    tt = tt.reshape(len(tk), ct.shape[1])
    if changes_first:
        return join_sorted_reference(ck, cv, ct, cd, tk, tv, tt, td, 1)
    return join_sorted_reference(tk, tv, tt, td, ck, cv, ct, cd, 1)
