"""The trie layout of a batch: one int64 buffer that kernels walk by address.

A batch of consolidated keyed updates ``(key, val, time, diff)``, sorted by key, val and time
(lexicographically), is a trie of ``nk`` distinct keys, ``nv`` distinct (key, val) pairs and ``n``
updates of ``d`` time coordinates. It is stored as consecutive regions of one buffer; searches read
the keys alone, and the rows of the other tables keep together what a reader of one key needs, so
that finding a key and gathering its updates touches few cache lines:

    keys[nk] | key_offs[nk + 1] | vals[nv + 1, 2] | updates[n, d + 1] | radix[nr]

* ``keys``: the distinct keys, ascending; the vals of key ``i`` are rows
  ``key_offs[i] .. key_offs[i + 1]`` of ``vals`` (``key_offs[nk] == nv``).
* ``vals[j] = (val, first)``: a val (ascending within its key) and the row of its first update; its
  updates are rows ``vals[j, 1] .. vals[j + 1, 1]``. The last row is ``(0, n)``.
* ``updates[r] = (t_0, ..., t_{d-1}, diff)``: a time (ascending lexicographically within its val,
  distinct) and its non-zero diff.
* ``radix`` indexes the keys of large tries (at least ``INDEXED`` keys; smaller ones have none,
  ``nr == 0``): the key range ``keys[0] .. keys[nk - 1]`` is cut into ``B`` equal buckets
  (``B`` the power of two at least ``nk / BUCKET``, ``nr == B + 1``; key ``k`` falls in bucket
  ``(k - low) >> shift`` with ``low`` the least key and ``shift`` the least that maps the range onto
  ``B`` buckets) and ``radix[b]`` is the index of the first key in bucket ``b`` or later. A search
  reads one entry and then the few keys of one bucket, instead of ``log2 nk`` keys spread over the
  whole batch (keys that spread evenly, as ids do, fill buckets evenly; skewed keys cost a bisection
  of a larger bucket, never more than one step more than bisecting everything).

A kernel needs only the buffer's address and ``(nk, nv, n, d)`` to walk it (see :mod:`.address`), so
one call can walk any number of batches. ``size(nk, nv, n, d)`` is the buffer's length and
``layout(nk, nv, n, d)`` where each region starts.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel

BUCKET = 8  # keys per radix bucket, on average
INDEXED = 4096  # tries with at least this many keys have a radix index

_inline = numba.njit(cache=True, nogil=True, inline="always")


def _radix_length(nk):
    if nk < INDEXED:
        return 0
    buckets = 1
    while buckets * BUCKET < nk:
        buckets *= 2
    return buckets + 1


radix_length = _inline(_radix_length)


def _regions(nk, nv, n, d):
    """Start of each region: ``(key_offs, vals, updates, radix, end)`` (keys start at 0)."""
    ko = nk
    va = ko + nk + 1
    up = va + 2 * (nv + 1)
    ri = up + n * (d + 1)
    return ko, va, up, ri, ri + radix_length(nk)


regions = _inline(_regions)  # layout() inside kernels


def layout(nk: int, nv: int, n: int, d: int) -> tuple[int, int, int, int, int]:
    """Start of each region of a trie buffer: ``(key_offs, vals, updates, radix, end)`` (keys start at 0)."""
    ko = nk
    va = ko + nk + 1
    up = va + 2 * (nv + 1)
    ri = up + n * (d + 1)
    return ko, va, up, ri, ri + _radix_length(nk)


def size(nk: int, nv: int, n: int, d: int) -> int:
    """Length of the buffer of a trie with these sizes."""
    return layout(nk, nv, n, d)[4]


@_inline
def tables(buf, nk, nv, n, d):
    """``(keys, key_offs, vals, updates)``: the trie's regions as views of ``buf`` (the last two 2-D)."""
    ko, va, up, ri, end = regions(nk, nv, n, d)
    return buf[:nk], buf[ko:va], buf[va:up].reshape((nv + 1, 2)), buf[up:ri].reshape((n, d + 1))


@_inline
def radix_shift(low, high, buckets):
    """The least shift mapping ``high - low`` (as unsigned) below ``buckets`` (a power of two)."""
    span = np.uint64(high) - np.uint64(low)
    shift = 0
    while (span >> np.uint64(shift)) >= np.uint64(buckets):
        shift += 1
    return shift


@_inline
def bucket(key, low, shift):
    """The radix bucket of ``key`` (``low <= key``)."""
    return np.int64((np.uint64(key) - np.uint64(low)) >> np.uint64(shift))


@_inline
def write_radix(buf, nk, ri):
    """Write the radix index of the trie's ``nk`` keys (at the start of ``buf``) to ``buf[ri:]``."""
    nr = radix_length(nk)
    if nr == 0:
        return
    low = buf[0]
    shift = radix_shift(low, buf[nk - 1], nr - 1)
    b = 0
    for i in range(nk):
        k = bucket(buf[i], low, shift)
        while b <= k:
            buf[ri + b] = i
            b += 1
    while b < nr:
        buf[ri + b] = nk
        b += 1


@_inline
def _count(keys, vals):
    """``(nk, nv)``: distinct keys and distinct (key, val) pairs of sorted columns."""
    nk = 0
    nv = 0
    for i in range(len(keys)):
        if i == 0 or keys[i] != keys[i - 1]:
            nk += 1
            nv += 1
        elif vals[i] != vals[i - 1]:
            nv += 1
    return nk, nv


@_inline
def _fill(buf, keys, vals, times, diffs, nk, nv):
    n = len(keys)
    d = times.shape[1]
    key_table, key_offs, val_table, updates = tables(buf, nk, nv, n, d)
    k = -1
    v = -1
    for i in range(n):
        new_key = i == 0 or keys[i] != keys[i - 1]
        if new_key or vals[i] != vals[i - 1]:
            v += 1
            val_table[v, 0] = vals[i]
            val_table[v, 1] = i
            if new_key:
                k += 1
                key_table[k] = keys[i]
                key_offs[k] = v
        for c in range(d):
            updates[i, c] = times[i, c]
        updates[i, d] = diffs[i]
    key_offs[nk] = nv
    val_table[nv, 0], val_table[nv, 1] = 0, n
    write_radix(buf, nk, regions(nk, nv, n, d)[3])


@kernel
def build(keys, vals, times, diffs):
    """``(buffer, address, nk, nv)``: the trie of consolidated keyed updates, in a new buffer.

    On entry ``keys``, ``vals``, ``diffs`` (length ``n``) and ``times`` (``(n, d)``, C-contiguous) are
    sorted by (key, val, time) with no (key, val, time) repeated; nothing is checked. ``address`` is
    the buffer's data address.
    """
    nk, nv = _count(keys, vals)
    buf = np.empty(regions(nk, nv, len(keys), times.shape[1])[4], np.int64)
    _fill(buf, keys, vals, times, diffs, nk, nv)
    return buf, buf.ctypes.data, nk, nv


@kernel
def count(keys, vals):
    """``(nk, nv)``: the distinct keys and (key, val) pairs of sorted columns (to size a buffer)."""
    return _count(keys, vals)


@kernel
def build_into(buffer, keys, vals, times, diffs, nk, nv):
    """:func:`build` into ``buffer`` (``size(nk, nv, n, d)`` long, ``(nk, nv)`` from :func:`count`),
    for callers that allocate large buffers themselves; returns its address."""
    _fill(buffer, keys, vals, times, diffs, nk, nv)
    return buffer.ctypes.data


def build_reference(keys: np.ndarray, vals: np.ndarray, times: np.ndarray, diffs: np.ndarray) -> np.ndarray:
    """The buffer :func:`build` makes, by numpy: distinct keys and (key, val) pairs and their offsets."""
    n = len(keys)
    new_val = np.ones(n, dtype=bool)
    new_val[1:] = (keys[1:] != keys[:-1]) | (vals[1:] != vals[:-1])
    val_starts = np.flatnonzero(new_val)
    new_key = np.ones(len(val_starts), dtype=bool)
    new_key[1:] = keys[val_starts][1:] != keys[val_starts][:-1]
    key_starts = np.flatnonzero(new_key)
    distinct_keys = keys[val_starts][key_starts]
    val_table = np.column_stack([np.append(vals[val_starts], 0), np.append(val_starts, n)])
    updates = np.column_stack([times, diffs])
    return np.concatenate([distinct_keys, key_starts, [len(val_starts)], val_table.reshape(-1), updates.reshape(-1),
                           radix_reference(distinct_keys)]).astype(np.int64)


def radix_reference(keys: np.ndarray) -> np.ndarray:
    """The radix index of the sorted distinct ``keys`` by Python integers and ``searchsorted``."""
    nr = _radix_length(len(keys))
    if nr == 0:
        return np.empty(0, dtype=np.int64)
    low, high = int(keys[0]), int(keys[-1])
    shift = 0
    while (high - low) >> shift >= nr - 1:
        shift += 1
    buckets = np.asarray([(int(k) - low) >> shift for k in keys.tolist()], dtype=np.int64)
    return np.searchsorted(buckets, np.arange(nr), "left").astype(np.int64)
