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
  (``B`` the power of two at least ``nk / BUCKET``, ``nr == 2 (B + 1)``; key ``k`` falls in bucket
  ``(k - low) >> shift`` with ``low`` the least key and ``shift`` the least that maps the range onto
  ``B`` buckets). ``radix[2 b]`` is the index of the first key in bucket ``b`` or later, and beside
  it ``radix[2 b + 1]`` the bucket's *filter*: the OR of :func:`filter_bits` of its keys (two bits of
  64 per key; the last entry's filter is 0). A search reads one entry and its filter (one cache
  line): a key whose bits are not all in the filter is not in the trie (a key that is not there
  passes with a chance of about 5% when a bucket holds 8 keys), else it reads the few keys of one
  bucket, instead of ``log2 nk`` keys spread over the whole batch (keys that spread evenly, as ids
  do, fill buckets evenly; skewed keys cost a bisection of a larger bucket, never more than one step
  more than bisecting everything).

A kernel needs only the buffer's address and ``(nk, nv, n, d)`` to walk it (see :mod:`.address`), so
one call can walk any number of batches. ``size(nk, nv, n, d)`` is the buffer's length and
``layout(nk, nv, n, d)`` where each region starts.
"""

from __future__ import annotations

import numba
import numpy as np

from . import helper, kernel
from .consolidate import add
from .frontier import row_beyond

# numba's on-disk cache keys a compiled kernel by the text of its own module only, not by the text of
# the helpers it inlines from here (regions, tables, write_radix, ...): a kernel module that inlines
# them repeats this number (``LAYOUT``) and checks it at import, so that a change of the layout, which
# must bump it, also changes the text of every such module and so recompiles their kernels.
LAYOUT = 2  # 2: radix entries interleaved with bucket filters
BUCKET = 8  # keys per radix bucket, on average
INDEXED = 4096  # tries with at least this many keys have a radix index

_inline = numba.njit(cache=True, nogil=True, inline="always")


def _radix_length(nk):
    if nk < INDEXED:
        return 0
    buckets = 1
    while buckets * BUCKET < nk:
        buckets *= 2
    return 2 * (buckets + 1)


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


_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: a multiplicative hash


@_inline
def filter_bits(key):
    """Two of 64 bits chosen by a multiplicative hash of ``key`` (as an int64 word)."""
    h = np.uint64(key) * np.uint64(_GOLDEN)
    one = np.uint64(1)
    return np.int64((one << (h >> np.uint64(58))) | (one << ((h >> np.uint64(52)) & np.uint64(63))))


@_inline
def write_radix(buf, nk, ri):
    """Write the radix index and bucket filters of the trie's ``nk`` keys (at the start of ``buf``) to
    ``buf[ri:]``."""
    nr = radix_length(nk)
    if nr == 0:
        return
    buckets = nr // 2 - 1
    low = buf[0]
    shift = radix_shift(low, buf[nk - 1], buckets)
    b = 0
    for i in range(nk):
        k = bucket(buf[i], low, shift)
        while b <= k:
            buf[ri + 2 * b] = i
            buf[ri + 2 * b + 1] = 0
            b += 1
        buf[ri + 2 * k + 1] |= filter_bits(buf[i])
    while b <= buckets:
        buf[ri + 2 * b] = nk
        buf[ri + 2 * b + 1] = 0
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


SMALL = 64  # updates up to which :func:`build_small` consolidates by insertion sort


@_inline
def _row_less(keys, vals, times, a, b):
    """True when row ``a`` sorts before row ``b`` by (key, val, time coordinates)."""
    if keys[a] != keys[b]:
        return keys[a] < keys[b]
    if vals[a] != vals[b]:
        return vals[a] < vals[b]
    for c in range(times.shape[1]):
        if times[a, c] != times[b, c]:
            return times[a, c] < times[b, c]
    return False


@kernel
def build_small(keys, vals, times, diffs, out):
    """``(address, nk, nv, n, end, bad)``: the trie of keyed updates in any order, consolidated on the
    way, written into ``out``: for batches of at most ``SMALL`` updates, one call instead of a
    consolidation and a build, and no array returned (returning one costs microseconds).

    ``keys``, ``vals``, ``diffs`` (length ``m``) and ``times`` (``(m, d)``) are C-contiguous int64 in any
    order, with repeats and zero diffs allowed; ``out`` is int64, at least ``size(m, m, m, d)`` long. The
    trie holds each distinct (key, val, time) once with the sum of its diffs, zero sums dropped (``n``
    updates), in ``out[:end]``; ``address`` is ``out``'s data address. ``bad`` is ``-1``, or the index
    of an input row whose (key, val, time) diffs sum outside int64: then nothing is built (``n == 0``)
    and the caller raises. Sorting is by insertion (quadratic: keep ``m`` small)."""
    return _build_rows(keys, vals, times, diffs, np.arange(len(keys)), out)


@kernel
def build_complete(keys, vals, times, diffs, frontier, out, flat, pending):
    """``(address, nk, nv, n, end, bad, waiting)``: :func:`build_small` of the rows whose time is not
    beyond ``frontier`` (an arrangement's step: what is complete is sealed, the rest waits), also
    written out flat, in one call.

    Arguments as for :func:`build_small` (at most ``SMALL`` rows), plus ``frontier`` (``(f, d)``
    int64, C-contiguous: a row is beyond it when its time is ``>=`` some row of it), ``flat`` (int64,
    at least ``m * (d + 3)`` long) and ``pending`` (int64, at least ``m`` long). The rows beyond the
    frontier are not in the trie: their indices, ascending, are ``pending[:waiting]``. The trie's
    updates, in trie order, are written to ``flat`` as columns one after another: keys
    ``flat[:n]``, vals ``flat[n:2n]``, diffs ``flat[2n:3n]``, times ``flat[3n:3n + n * d]`` (row-major
    ``(n, d)``). ``bad`` as for :func:`build_small` (then ``n == 0`` and nothing is written to
    ``flat``)."""
    m = len(keys)
    d = times.shape[1]
    rows = np.empty(m, np.int64)
    ready = 0
    waiting = 0
    for i in range(m):
        if row_beyond(times, i, frontier):
            pending[waiting] = i
            waiting += 1
        else:
            rows[ready] = i
            ready += 1
    address, nk, nv, n, end, bad = _build_rows(keys, vals, times, diffs, rows[:ready], out)
    if bad < 0:
        key_table, key_offs, val_table, updates = tables(out, nk, nv, n, d)
        for k in range(nk):
            for v in range(key_offs[k], key_offs[k + 1]):
                for r in range(val_table[v, 1], val_table[v + 1, 1]):
                    flat[r] = key_table[k]
                    flat[n + r] = val_table[v, 0]
                    flat[2 * n + r] = updates[r, d]
                    for c in range(d):
                        flat[3 * n + r * d + c] = updates[r, c]
    return address, nk, nv, n, end, bad, waiting


@helper
def _build_rows(keys, vals, times, diffs, rows, out):
    """:func:`build_small` of the input rows ``rows`` (indices, in any order); ``bad`` is an input row
    index."""
    m = len(rows)
    d = times.shape[1]
    order = np.empty(m, np.int64)
    for i in range(m):  # stable insertion sort of the row indices
        j = i
        while j > 0 and _row_less(keys, vals, times, rows[i], order[j - 1]):
            order[j] = order[j - 1]
            j -= 1
        order[j] = rows[i]
    sums = np.empty(m, np.int64)
    n = 0
    nk = 0
    nv = 0
    i = 0
    while i < m:  # sum each run of equal rows into the first's place, dropping zeros; count keys, vals
        first = order[i]
        total, carry = diffs[first], 0
        j = i + 1
        while j < m and not _row_less(keys, vals, times, first, order[j]):
            total, carry = add(total, carry, diffs[order[j]])
            j += 1
        if carry != 0:
            return out.ctypes.data, 0, 0, 0, 0, first
        if total != 0:
            if n == 0 or keys[first] != keys[order[n - 1]]:
                nk += 1
                nv += 1
            elif vals[first] != vals[order[n - 1]]:
                nv += 1
            order[n] = first
            sums[n] = total
            n += 1
        i = j
    key_table, key_offs, val_table, updates = tables(out, nk, nv, n, d)
    k = -1
    v = -1
    for r in range(n):
        o = order[r]
        new_key = r == 0 or keys[o] != keys[order[r - 1]]
        if new_key or vals[o] != vals[order[r - 1]]:
            v += 1
            val_table[v, 0] = vals[o]
            val_table[v, 1] = r
            if new_key:
                k += 1
                key_table[k] = keys[o]
                key_offs[k] = v
        for c in range(d):
            updates[r, c] = times[o, c]
        updates[r, d] = sums[r]
    key_offs[nk] = nv
    val_table[nv, 0], val_table[nv, 1] = 0, n
    end = regions(nk, nv, n, d)[4]
    write_radix(out, nk, regions(nk, nv, n, d)[3])
    return out.ctypes.data, nk, nv, n, end, -1


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


def build_complete_reference(keys: np.ndarray, vals: np.ndarray, times: np.ndarray, diffs: np.ndarray,
                             frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`build_complete` by the references: ``(trie buffer, flat, pending)`` (``flat`` only the
    ``n * (d + 3)`` values written). Raises ``SumOverflow`` where the kernel reports ``bad``."""
    from .consolidate import consolidate_reference
    from .frontier import beyond_reference

    mask, _ = beyond_reference(times, frontier)
    keep = ~mask
    (k, v), t, x = consolidate_reference((keys[keep], vals[keep]), times[keep].reshape(-1, times.shape[1]), diffs[keep])
    flat = np.concatenate([k, v, x, t.reshape(-1)]).astype(np.int64)
    return build_reference(k, v, t, x), flat, np.flatnonzero(mask).astype(np.int64)


def filter_bits_reference(key: int) -> int:
    """:func:`filter_bits` by Python integers (as a signed 64-bit value)."""
    h = (key * _GOLDEN) % 2**64
    bits = (1 << (h >> 58)) | (1 << ((h >> 52) & 63))
    return bits - 2**64 if bits >= 2**63 else bits


def radix_reference(keys: np.ndarray) -> np.ndarray:
    """The radix index and bucket filters of the sorted distinct ``keys`` by Python integers and
    ``searchsorted``."""
    nr = _radix_length(len(keys))
    if nr == 0:
        return np.empty(0, dtype=np.int64)
    count = nr // 2 - 1
    low, high = int(keys[0]), int(keys[-1])
    shift = 0
    while (high - low) >> shift >= count:
        shift += 1
    buckets = np.asarray([(int(k) - low) >> shift for k in keys.tolist()], dtype=np.int64)
    filters = [0] * (count + 1)
    for k, b in zip(keys.tolist(), buckets.tolist(), strict=True):
        filters[b] |= filter_bits_reference(k)
    starts = np.searchsorted(buckets, np.arange(count + 1), "left").astype(np.int64)
    return np.column_stack([starts, np.asarray(filters, dtype=np.int64)]).reshape(-1)
