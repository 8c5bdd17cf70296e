"""Reading tries: looking up many keys in every batch of a trace at once, and flattening tries.

A trace's batches are handed over as a *table*: an ``(b, 4)`` int64 array with one row
``(address, nk, nv, n)`` per trie buffer (see :mod:`.trie` and :mod:`.address`), all of time depth
``d``. :func:`lookup` finds the rows of any number of keys in all of them in one call: per batch,
all query keys are located together, by one merge pass over the batch's keys when the query is
dense, else by a binary search that advances every query one level at a time (independent loads the
processor overlaps), then the matching vals and histories are gathered.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel
from .address import column
from .trie import regions

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _sorted_distinct(query):
    """``query`` itself when strictly increasing, else its sorted distinct values."""
    for i in range(1, len(query)):
        if query[i] <= query[i - 1]:
            s = np.sort(query)
            keep = 1
            for j in range(1, len(s)):
                if s[j] != s[keep - 1]:
                    s[keep] = s[j]
                    keep += 1
            return s[:keep]
    return query


@_jit
def _lower_bounds(keys, query, pos):
    """``pos[j]``: the first index of the sorted ``keys`` whose key is ``>= query[j]`` (sorted query)."""
    nk, nq = len(keys), len(query)
    if nk == 0 or nq == 0:
        pos[:] = 0
        return
    if nk <= 4 * nq:  # dense: one merge pass
        i = 0
        for j in range(nq):
            while i < nk and keys[i] < query[j]:
                i += 1
            pos[j] = i
        return
    pos[:] = 0
    length = nk
    while length > 1:
        half = length // 2
        for j in range(nq):
            p = pos[j]
            pos[j] = p + half if keys[p + half] < query[j] else p
        length -= half
    for j in range(nq):
        if keys[pos[j]] < query[j]:
            pos[j] += 1


@kernel
def lookup(query, table, depth):
    """``(keys, vals, times, diffs)``: every update whose key is in ``query``, in the tries of ``table``.

    ``query`` holds any int64 keys (duplicates and order do not matter); ``table`` rows are
    ``(address, nk, nv, n)`` of trie buffers of time depth ``depth``. The result is ordered by key,
    then by the table's batch order, then by val and time within a batch: sorted by key, and by
    (key, val, time) within each batch. Updates are not consolidated across batches.
    """
    query = _sorted_distinct(query)
    nb, nq = table.shape[0], len(query)
    found = np.full((nb, nq), -1, np.int64)
    counts = np.zeros((nb, nq), np.int64)
    pos = np.empty(nq, np.int64)
    for b in range(nb):
        nk, nv, n = table[b, 1], table[b, 2], table[b, 3]
        ko, va, vo, di, ti, end = regions(nk, nv, n, depth)
        buf = column(table[b, 0], end)
        keys = buf[:nk]
        _lower_bounds(keys, query, pos)
        for j in range(nq):
            i = pos[j]
            if i < nk and keys[i] == query[j]:
                found[b, j] = i
                counts[b, j] = buf[vo + buf[ko + i + 1]] - buf[vo + buf[ko + i]]
    starts = np.empty((nb, nq), np.int64)
    total = 0
    for j in range(nq):
        for b in range(nb):
            starts[b, j] = total
            total += counts[b, j]
    out_keys = np.empty(total, np.int64)
    out_vals = np.empty(total, np.int64)
    out_times = np.empty((total, depth), np.int64)
    out_diffs = np.empty(total, np.int64)
    for b in range(nb):
        nk, nv, n = table[b, 1], table[b, 2], table[b, 3]
        ko, va, vo, di, ti, end = regions(nk, nv, n, depth)
        buf = column(table[b, 0], end)
        for j in range(nq):
            i = found[b, j]
            if i < 0:
                continue
            w = starts[b, j]
            for v in range(buf[ko + i], buf[ko + i + 1]):
                for r in range(buf[vo + v], buf[vo + v + 1]):
                    out_keys[w] = query[j]
                    out_vals[w] = buf[va + v]
                    out_diffs[w] = buf[di + r]
                    for c in range(depth):
                        out_times[w, c] = buf[ti + r * depth + c]
                    w += 1
    return out_keys, out_vals, out_times, out_diffs


@kernel
def flatten(table, depth):
    """``(keys, vals, times, diffs)``: every update of the tries of ``table`` (rows as for
    :func:`lookup`), batch after batch, each batch's updates in trie order."""
    total = 0
    for b in range(table.shape[0]):
        total += table[b, 3]
    out_keys = np.empty(total, np.int64)
    out_vals = np.empty(total, np.int64)
    out_times = np.empty((total, depth), np.int64)
    out_diffs = np.empty(total, np.int64)
    w = 0
    for b in range(table.shape[0]):
        nk, nv, n = table[b, 1], table[b, 2], table[b, 3]
        ko, va, vo, di, ti, end = regions(nk, nv, n, depth)
        buf = column(table[b, 0], end)
        for i in range(nk):
            for v in range(buf[ko + i], buf[ko + i + 1]):
                for r in range(buf[vo + v], buf[vo + v + 1]):
                    out_keys[w + r] = buf[i]
                    out_vals[w + r] = buf[va + v]
        for r in range(n):
            out_diffs[w + r] = buf[di + r]
            for c in range(depth):
                out_times[w + r, c] = buf[ti + r * depth + c]
        w += n
    return out_keys, out_vals, out_times, out_diffs


@kernel
def expand(buffer, nk, nv, n, depth, lo, hi):
    """``(keys, vals)``: the key and val of every update of the keys with index ``lo .. hi`` of one trie
    (the updates ``val_offs[key_offs[lo]] .. val_offs[key_offs[hi]]``, in order)."""
    ko, va, vo, di, ti, end = regions(nk, nv, n, depth)
    first = buffer[vo + buffer[ko + lo]]
    last = buffer[vo + buffer[ko + hi]]
    out_keys = np.empty(last - first, np.int64)
    out_vals = np.empty(last - first, np.int64)
    for i in range(lo, hi):
        for v in range(buffer[ko + i], buffer[ko + i + 1]):
            for r in range(buffer[vo + v], buffer[vo + v + 1]):
                out_keys[r - first] = buffer[i]
                out_vals[r - first] = buffer[va + v]
    return out_keys, out_vals


def expand_reference(keys, key_offs, vals, val_offs, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`expand` by ``numpy.repeat`` over the trie's columns."""
    v0, v1 = key_offs[lo], key_offs[hi]
    per_val = np.diff(val_offs[v0 : v1 + 1])
    per_key = val_offs[key_offs[lo + 1 : hi + 1]] - val_offs[key_offs[lo:hi]]
    return np.repeat(keys[lo:hi], per_key), np.repeat(vals[v0:v1], per_val)


def lookup_reference(query: np.ndarray, batches: list[tuple[np.ndarray, ...]]):
    """:func:`lookup` by filtering: ``batches`` are flat ``(keys, vals, times, diffs)`` in trie order;
    the rows of the distinct query keys, by key, then batch, then within the batch in order."""
    d = batches[0][2].shape[1] if batches else 1
    rows = []
    for key in sorted(set(np.asarray(query).tolist())):
        for keys, vals, times, diffs in batches:
            for i in np.flatnonzero(keys == key).tolist():
                rows.append((key, int(vals[i]), times[i].tolist(), int(diffs[i])))
    return (
        np.asarray([r[0] for r in rows], dtype=np.int64),
        np.asarray([r[1] for r in rows], dtype=np.int64),
        np.asarray([r[2] for r in rows], dtype=np.int64).reshape(len(rows), d),
        np.asarray([r[3] for r in rows], dtype=np.int64),
    )
