"""Reading tries: looking up many keys in every batch of a trace at once, and flattening tries.

A trace's batches are handed over as a *table*: an ``(b, 4)`` int64 array with one row
``(address, nk, nv, n)`` per trie buffer (see :mod:`.trie` and :mod:`.address`), all of time depth
``d``. :func:`lookup` finds the updates of any number of keys in all of them in one call. Per batch,
all query keys are located together: by one merge pass over the batch's keys when the query is
dense; else through the batch's radix index (one entry and its bucket's filter, which rules out
most keys the batch does not hold without reading its keys; then a branch-free search of the 16
keys from the start of the key's bucket); or, for small batches, by a binary search that advances every
query one halving at a time. Then the matching vals and updates are gathered, each step for all hits
at once, the first update row of every hit brought in before the output is written. Each step is a
loop whose iterations do not depend on each other, so the processor overlaps their memory accesses
instead of waiting for each in turn.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel
from .address import column
from .trie import INDEXED, LAYOUT, bucket, filter_bits, radix_length, radix_shift, regions, tables

if LAYOUT != 2:  # the trie layout these kernels were compiled for (see kernels.trie.LAYOUT)
    raise ImportError(f"{__name__} inlines trie layout 2, kernels.trie has {LAYOUT}: update both")

_jit = numba.njit(cache=True, nogil=True)
WINDOW = 16  # keys a branch-free search covers (four halvings)


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
def _bisect(keys, query, pos):
    """``pos[j]``: the first index of the sorted, non-empty ``keys`` whose key is ``>= query[j]``,
    every query advanced one halving at a time."""
    pos[:] = 0
    length = len(keys)
    while length > 1:
        half = length // 2
        for j in range(len(query)):
            p = pos[j]
            pos[j] = p + half if keys[p + half] < query[j] else p
        length -= half
    for j in range(len(query)):
        if keys[pos[j]] < query[j]:
            pos[j] += 1


@_jit
def _find(buf, nk, ri, query, pos, size):
    """``pos[j]``: the index of ``query[j]`` among the trie's keys (``buf[:nk]``, radix index at
    ``buf[ri:]``), or -1 when it is not there (sorted query). ``size``: scratch, one longer than the
    query."""
    nq = len(query)
    keys = buf[:nk]
    if nk == 0 or nq == 0:
        pos[:] = -1
        return
    if nk <= 4 * nq:  # dense: one merge pass
        i = 0
        for j in range(nq):
            while i < nk and keys[i] < query[j]:
                i += 1
            pos[j] = i
    elif nk >= INDEXED:
        # each query's bucket and its filter (one index entry): a query the filter rules out is not
        # searched; the others search the 16 keys from their bucket's start branch-free (buckets hold
        # 8 keys on average) or, in a larger bucket, bisect it
        buckets = radix_length(nk) // 2 - 1
        low, high = keys[0], keys[nk - 1]
        shift = radix_shift(low, high, buckets)
        for j in range(nq):
            q = query[j]
            at = ri + 2 * bucket(min(max(q, low), high), low, shift)
            bits = filter_bits(q)
            if q < low or q > high or buf[at + 1] & bits != bits:
                pos[j] = -1
            else:
                pos[j] = buf[at]
                size[j] = buf[at + 2] - buf[at]
        touched = 0
        for j in range(nq):  # bring each candidate bucket's keys in, all queries' loads at once
            p = pos[j]
            if p >= 0:
                touched ^= keys[p] ^ keys[min(p + 8, nk - 1)]
        size[nq] = touched  # a store the compiler must keep, so the loads above happen
        for j in range(nq):
            p, q, n = pos[j], query[j], size[j]
            if p < 0:
                continue
            if n < WINDOW and p + WINDOW <= nk:
                p = p + 8 if keys[p + 7] < q else p
                p = p + 4 if keys[p + 3] < q else p
                p = p + 2 if keys[p + 1] < q else p
                p = p + 1 if keys[p] < q else p
            else:
                while n > 0:
                    half = n >> 1
                    if keys[p + half] < q:
                        p += half + 1
                        n -= half + 1
                    else:
                        n = half
            pos[j] = p
    else:
        _bisect(keys, query, pos)
    for j in range(nq):
        p = pos[j]
        if p >= 0 and (p >= nk or keys[p] != query[j]):
            pos[j] = -1


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
    found = np.empty((nb, nq), np.int64)  # index of query j among batch b's keys, or -1
    starts = np.empty((nb, 4), np.int64)  # per batch: where its key_offs, vals, updates start; its length
    pos = np.empty(nq, np.int64)
    size = np.empty(nq + 1, np.int64)
    hits = 0
    for b in range(nb):
        nk, nv, n = table[b, 1], table[b, 2], table[b, 3]
        ko, va, up, ri, end = regions(nk, nv, n, depth)
        starts[b, 0], starts[b, 1], starts[b, 2], starts[b, 3] = ko, va, up, end
        buf = column(table[b, 0], end)
        _find(buf, nk, ri, query, pos, size)
        for j in range(nq):
            found[b, j] = pos[j]
            hits += pos[j] >= 0
    # the hits in output order (by key, then batch), then their val ranges, then their update ranges,
    # each a pass over all hits (flat indexing: no per-hit views). A batch with one val per key
    # (nk == nv) has key i's vals at row i, and one with one update per val (nv == n) val v's updates
    # at row v: those reads are skipped, so such a hit's val and update rows are read at once.
    hit_batch = np.empty(hits, np.int64)
    hit_key = np.empty(hits, np.int64)
    v0 = np.empty(hits, np.int64)
    v1 = np.empty(hits, np.int64)
    h = 0
    for j in range(nq):
        for b in range(nb):
            if found[b, j] >= 0:
                hit_batch[h], hit_key[h], v0[h] = b, j, found[b, j]
                h += 1
    for h in range(hits):
        b = hit_batch[h]
        if table[b, 1] == table[b, 2]:
            v1[h] = v0[h] + 1
        else:
            buf = column(table[b, 0], starts[b, 3])
            i = starts[b, 0] + v0[h]
            v0[h], v1[h] = buf[i], buf[i + 1]
    out_at = np.empty(hits + 1, np.int64)
    out_at[0] = 0
    for h in range(hits):
        b = hit_batch[h]
        if table[b, 2] == table[b, 3]:
            out_at[h + 1] = out_at[h] + v1[h] - v0[h]
        else:
            buf = column(table[b, 0], starts[b, 3])
            va = starts[b, 1]
            out_at[h + 1] = out_at[h] + buf[va + 2 * v1[h] + 1] - buf[va + 2 * v0[h] + 1]
    total = out_at[hits]
    touched = 0
    for h in range(hits):  # bring every hit's first val and update rows in, all loads at once
        b = hit_batch[h]
        buf = column(table[b, 0], starts[b, 3])
        va = starts[b, 1]
        r = v0[h] if table[b, 2] == table[b, 3] else buf[va + 2 * v0[h] + 1]
        touched ^= buf[va + 2 * v0[h]] ^ buf[starts[b, 2] + r * (depth + 1)]
    size[0] = touched  # a store the compiler must keep, so the loads above happen
    out_keys = np.empty(total, np.int64)
    out_vals = np.empty(total, np.int64)
    out_times = np.empty((total, depth), np.int64)
    out_diffs = np.empty(total, np.int64)
    width = depth + 1
    for h in range(hits):
        b = hit_batch[h]
        buf = column(table[b, 0], starts[b, 3])
        va, up = starts[b, 1], starts[b, 2]
        w = out_at[h]
        key = query[hit_key[h]]
        single = table[b, 2] == table[b, 3]  # one update per val: val v's update is row v
        for v in range(v0[h], v1[h]):
            first, last = (v, v + 1) if single else (buf[va + 2 * v + 1], buf[va + 2 * v + 3])
            for r in range(first, last):
                out_keys[w] = key
                out_vals[w] = buf[va + 2 * v]
                for c in range(depth):
                    out_times[w, c] = buf[up + r * width + c]
                out_diffs[w] = buf[up + r * width + depth]
                w += 1
    return out_keys, out_vals, out_times, out_diffs


@_jit
def _expand_into(keys, key_offs, vals, updates, lo, hi, depth, out_keys, out_vals, out_times, out_diffs, w):
    """Write the updates of keys ``lo .. hi`` of one trie's tables from row ``w`` of the outputs."""
    for i in range(lo, hi):
        for v in range(key_offs[i], key_offs[i + 1]):
            for r in range(vals[v, 1], vals[v + 1, 1]):
                out_keys[w] = keys[i]
                out_vals[w] = vals[v, 0]
                for c in range(depth):
                    out_times[w, c] = updates[r, c]
                out_diffs[w] = updates[r, depth]
                w += 1
    return w


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
        keys, key_offs, vals, updates = tables(column(table[b, 0], regions(nk, nv, n, depth)[4]), nk, nv, n, depth)
        w = _expand_into(keys, key_offs, vals, updates, 0, nk, depth, out_keys, out_vals, out_times, out_diffs, w)
    return out_keys, out_vals, out_times, out_diffs


@kernel
def expand(buffer, nk, nv, n, depth, lo, hi):
    """``(keys, vals, times, diffs)``: the updates of the keys with index ``lo .. hi`` of one trie, in
    trie order (new arrays)."""
    keys, key_offs, vals, updates = tables(buffer, nk, nv, n, depth)
    first, last = vals[key_offs[lo], 1], vals[key_offs[hi], 1]
    out_keys = np.empty(last - first, np.int64)
    out_vals = np.empty(last - first, np.int64)
    out_times = np.empty((last - first, depth), np.int64)
    out_diffs = np.empty(last - first, np.int64)
    _expand_into(keys, key_offs, vals, updates, lo, hi, depth, out_keys, out_vals, out_times, out_diffs, 0)
    return out_keys, out_vals, out_times, out_diffs


def expand_reference(keys: np.ndarray, key_offs: np.ndarray, val_table: np.ndarray, updates: np.ndarray,
                     lo: int, hi: int):
    """:func:`expand` by ``numpy.repeat`` over a trie's regions."""
    v0, v1 = key_offs[lo], key_offs[hi]
    r0, r1 = val_table[v0, 1], val_table[v1, 1]
    per_val = np.diff(val_table[v0 : v1 + 1, 1])
    per_key = val_table[key_offs[lo + 1 : hi + 1], 1] - val_table[key_offs[lo:hi], 1]
    rows = updates[r0:r1]
    return np.repeat(keys[lo:hi], per_key), np.repeat(val_table[v0:v1, 0], per_val), rows[:, :-1], rows[:, -1]


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
