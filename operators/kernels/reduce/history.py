"""Per-key histories kept by a reduction between its rounds: one run of rows per key in an arena.

A reduction that reads a key again (in a later round of the same loop, or a later epoch) need not
look the key up in its traces again: it keeps the key's rows, condensed (times advanced to a time
every later evaluation is at or beyond, equal ``(val, time)`` summed, zeros dropped), as one run
``[start[e], start[e] + length[e])`` of an arena of columns ``(val, time, diff)`` (``e`` the key's
entry). A new round replaces a key's run by a new one written at the arena's end; the old run
becomes garbage, collected when the arena next grows (live runs copied to the front, then the new
runs appended), so a store costs the rows stored, amortized, and never the arena.

:func:`history_store` condenses and writes runs; :func:`history_gather` reads the runs of some keys
back as rows, each followed by the key's new rows. Each has a plain reference (``*_reference``) over a
dict of runs.
"""

from __future__ import annotations

import numpy as np

from .. import helper, kernel
from ..sorting import merge_order
from .points import _by_key, _key_indices, _wrapping_add


# -- compiled -----------------------------------------------------------------------------------
@helper
def _row_before(v, t, i, j):
    """Row ``i`` before row ``j`` by ``(val, time)`` (times compared lexicographically)."""
    if v[i] != v[j]:
        return v[i] < v[j]
    for c in range(t.shape[1]):
        if t[i, c] != t[j, c]:
            return t[i, c] < t[j, c]
    return False


@helper
def _sort_rows(idx, v, t):
    """``idx`` sorted by the ``(val, time)`` of its rows: an insertion sort when short, else a bottom-up
    merge sort."""
    n = idx.shape[0]
    if n <= 32:
        for i in range(1, n):
            x = idx[i]
            j = i - 1
            while j >= 0 and _row_before(v, t, x, idx[j]):
                idx[j + 1] = idx[j]
                j -= 1
            idx[j + 1] = x
        return idx
    rows = np.empty((n, 1 + t.shape[1]), np.int64)
    for i in range(n):
        rows[i, 0] = v[idx[i]]
        for c in range(t.shape[1]):
            rows[i, 1 + c] = t[idx[i], c]
    order = merge_order(rows)
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = idx[order[i]]
    return out


@kernel
def history_store(keys, entries, rk, v, t, d, g, start, length, n_entries, av, at, ad, used):
    """Keep the rows ``(rk, v, t, d)`` (any order; every ``rk`` one of the sorted distinct ``keys``) as
    the runs of ``keys``, condensed: each time advanced to ``g`` (joined with it), rows of equal
    ``(val, time)`` summed, zeros dropped, a run in ``(val, time)`` order. Key ``keys[i]``'s run
    replaces that of entry ``entries[i]`` (a key without rows gets an empty run).

    ``start``, ``length`` (int64, one per entry, at least ``n_entries`` long; ``length[e] == 0`` for an
    entry with no run) describe the runs in the arena ``(av, at, ad)`` (``at``: ``(capacity,
    depth)``), whose first ``used`` rows are taken. Updates ``start`` and ``length`` in place and
    returns ``(av, at, ad, used, ok)``: the same arena, or, when the rows do not fit behind ``used``,
    a new one (capacity twice the live rows and the new ones) holding the live runs of the entries
    below ``n_entries`` not being replaced, packed from row 0, then the new runs. ``ok`` is false when
    a sum leaves int64: the runs written are then meaningless (the caller forgets them all)."""
    nk = keys.shape[0]
    n = rk.shape[0]
    depth = t.shape[1]
    for i in range(nk):
        length[entries[i]] = 0  # replaced: its old run is garbage
    if used + n > av.shape[0]:
        live = 0
        for e in range(n_entries):
            live += length[e]
        cap = max(16, 2 * (live + n))
        nv = np.empty(cap, np.int64)
        nt = np.empty((cap, depth), np.int64)
        nd = np.empty(cap, np.int64)
        w = 0
        for e in range(n_entries):
            s, m = start[e], length[e]
            for r in range(m):
                nv[w + r] = av[s + r]
                for c in range(depth):
                    nt[w + r, c] = at[s + r, c]
                nd[w + r] = ad[s + r]
            start[e] = w
            w += m
        av, at, ad, used = nv, nt, nd, w
    # the rows advanced, grouped by key
    tt = np.empty((n, depth), np.int64)
    for r in range(n):
        for c in range(depth):
            tt[r, c] = max(t[r, c], g[c])
    rows, offs = _by_key(_key_indices(keys, rk), np.arange(n), nk)
    ok = True
    for i in range(nk):
        e = entries[i]
        start[e] = used
        run = _sort_rows(rows[offs[i]:offs[i + 1]], v, tt)
        r = 0
        while r < run.shape[0]:
            j = run[r]
            total, carries = d[j], 0
            h = r + 1
            while h < run.shape[0] and v[run[h]] == v[j] and not _row_before(v, tt, j, run[h]):
                total, carry = _wrapping_add(total, d[run[h]])
                carries += carry
                h += 1
            if carries != 0:
                ok = False
            if total != 0:
                av[used] = v[j]
                for c in range(depth):
                    at[used, c] = tt[j, c]
                ad[used] = total
                used += 1
            r = h
        length[e] = used - start[e]
    return av, at, ad, used, ok


@kernel
def history_gather(keys, entries, start, length, av, at, ad, fk, fv, ft, fd):
    """The runs of the kept ``keys`` (those whose ``entries`` are not ``-1``) as rows ``(key, val,
    time, diff)``, each key's run followed by its rows among ``(fk, fv, ft, fd)`` (its new rows; every
    ``fk`` one of the sorted distinct ``keys``), key by key. Returns the rows and how many of them
    came from ``(fk, ...)``."""
    nk = keys.shape[0]
    fresh, f_off = _by_key(_key_indices(keys, fk), np.arange(fk.shape[0]), nk)
    n = 0
    n_fresh = 0
    for i in range(nk):
        if entries[i] >= 0:
            n += length[entries[i]]
            n_fresh += f_off[i + 1] - f_off[i]
    depth = at.shape[1]
    k = np.empty(n + n_fresh, np.int64)
    v = np.empty(n + n_fresh, np.int64)
    t = np.empty((n + n_fresh, depth), np.int64)
    d = np.empty(n + n_fresh, np.int64)
    w = 0
    for i in range(nk):
        e = entries[i]
        if e < 0:
            continue
        s = start[e]
        for r in range(length[e]):
            k[w] = keys[i]
            v[w] = av[s + r]
            for c in range(depth):
                t[w, c] = at[s + r, c]
            d[w] = ad[s + r]
            w += 1
        for q in range(f_off[i], f_off[i + 1]):
            j = fresh[q]
            k[w] = keys[i]
            v[w] = fv[j]
            for c in range(depth):
                t[w, c] = ft[j, c]
            d[w] = fd[j]
            w += 1
    return k, v, t, d, n_fresh


# -- reference ----------------------------------------------------------------------------------
def history_store_reference(runs: dict, keys, entries, rk, v, t, d, g) -> bool:
    """:func:`history_store` over a dict ``entry -> [(val, time, diff), ...]`` (updated in place), sums
    exact: returns false when one leaves int64."""
    sums: dict = {int(e): {} for e in entries.tolist()}
    entry = dict(zip(keys.tolist(), entries.tolist()))
    g = tuple(g.tolist())
    for key, val, time, diff in zip(rk.tolist(), v.tolist(), t.tolist(), d.tolist()):
        at = tuple(max(a, b) for a, b in zip(time, g))
        run = sums[entry[key]]
        run[(val, at)] = run.get((val, at), 0) + diff
    ok = all(-(1 << 63) <= x < (1 << 63) for run in sums.values() for x in run.values())
    for e, run in sums.items():
        runs[e] = [(val, at, x) for (val, at), x in sorted(run.items()) if x]
    return ok


def history_gather_reference(runs: dict, keys, entries, fk, fv, ft, fd):
    """:func:`history_gather` over the dict of :func:`history_store_reference`: ``([(key, val, time,
    diff), ...], fresh rows)``, a key's new rows in their given order."""
    out, n_fresh = [], 0
    fresh = list(zip(fk.tolist(), fv.tolist(), (tuple(x) for x in ft.tolist()), fd.tolist()))
    for key, e in zip(keys.tolist(), entries.tolist()):
        if e < 0:
            continue
        out += [(key, val, time, diff) for val, time, diff in runs.get(e, [])]
        mine = [(key, val, time, diff) for k, val, time, diff in fresh if k == key]
        out += mine
        n_fresh += len(mine)
    return out, n_fresh
