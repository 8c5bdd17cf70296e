"""Ordering rows of integer columns: the one primitive every kernel of the engine leans on.

Rows of several int64 columns are ordered lexicographically (first column most significant). When the
columns' ranges fit together in 63 bits, each row packs into one int64 (``(c0 - lo0) << w1+… | …``)
whose numeric order is the lexicographic order, and one argsort of it runs numpy's SIMD sort, about
ten times faster than ``numpy.lexsort`` of the columns. Columns too wide to fit are first replaced by
their dense ranks (one sort each); ``lexsort`` remains the fallback when even ranks do not fit. The
orders are not stable: rows with equal columns come in any order, which every caller sums or
deduplicates anyway. Rows are gathered with ``take``/``compress`` rather than fancy indexing.

:func:`radix_sort` is the compiled sort under consolidation: an MSD radix sort of uint64 keys (with an
optional int64 payload column) that beats numpy's SIMD sort on the packed keys the engine builds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import uint64

from . import helper, kernel

EMPTY = np.empty(0, dtype=np.int64)


def take(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Rows of ``a`` at ``index`` (a boolean mask or integer indices): ``a[index]`` by ``compress`` or
    ``take``, which numpy runs several times faster than fancy indexing (two-dimensional above all)."""
    if index.dtype == bool:
        return a.compress(index, axis=0)
    return a.take(index, axis=0)


def _layout(columns: Sequence[np.ndarray]) -> tuple[list[int], list[int]] | None:
    """Per column its least value and bit width, or ``None`` when the widths exceed 63 bits."""
    lows, widths = [], []
    for c in columns:
        lo, hi = int(c.min()), int(c.max())
        lows.append(lo)
        widths.append((hi - lo).bit_length())
    return (lows, widths) if sum(widths) <= 63 else None


def _pack(columns: Sequence[np.ndarray], lows: list[int], widths: list[int]) -> np.ndarray:
    key = None
    for c, lo, w in zip(columns, lows, widths):
        if not w:
            continue
        part = c - lo if lo else c
        if key is None:
            key = part.astype(np.int64, copy=part is c)  # never write into the caller's column
        else:
            key <<= w
            key |= part
    return np.zeros(len(columns[0]), dtype=np.int64) if key is None else key


def pack(columns: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 per row ordering rows like ``columns`` (first most significant), or ``None`` when the
    columns do not fit together in 63 bits even with the widest ones replaced by their dense ranks
    (order-preserving, so equal rows still get equal keys)."""
    if not columns or len(columns[0]) == 0:
        return EMPTY
    columns = list(columns)
    ranked = [False] * len(columns)
    while True:
        layout = _layout(columns)
        if layout is not None:
            return _pack(columns, *layout)
        widths = [-1 if r else w for w, r in zip(_widths(columns), ranked)]
        widest = int(np.argmax(widths))
        if widths[widest] < 0:
            return None
        columns[widest] = ranks(columns[widest])[1]
        ranked[widest] = True


def _widths(columns: Sequence[np.ndarray]) -> list[int]:
    return [(int(c.max()) - int(c.min())).bit_length() for c in columns]


def order(columns: Sequence[np.ndarray], runs: bool = False) -> np.ndarray:
    """Indices sorting the rows of ``columns`` lexicographically.

    ``runs``: the rows are a concatenation of a few sorted runs (a trace's batches, the two sides of
    a merge): a merging sort (numpy's stable sort) then costs about one pass, where the default SIMD
    quicksort, faster on unordered rows, would sort from scratch."""
    key = pack(columns)
    if key is not None:
        return argsort(key, runs)
    return np.lexsort(tuple(reversed(columns)))


def argsort(key: np.ndarray, runs: bool = False) -> np.ndarray:
    """Indices sorting the integers ``key`` (ties in index order): a merging sort for concatenated
    sorted runs, else quicksort. When the key's range and the row index fit together in 63 bits,
    each row's index is packed below its key and the packed values are sorted in place, which numpy
    does 15-35% faster than ``argsort`` moving indices alongside keys."""
    if len(key) > 1:
        columns = (key.astype(np.int64, copy=False), np.arange(len(key), dtype=np.int64))
        layout = _layout(columns)
        if layout is not None:
            packed = _pack(columns, *layout)
            packed.sort(kind="stable" if runs else None)
            packed &= (1 << layout[1][1]) - 1
            return packed
    return np.argsort(key, kind="stable")  # rare: keys spanning nearly all 64 bits


def starts(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Boolean mask of the rows (sorted by ``columns``) that differ from the previous row."""
    n = len(columns[0])
    mask = np.empty(n, dtype=bool)
    if n == 0:
        return mask
    mask[0] = True
    first = True
    for c in columns:
        if first:
            np.not_equal(c[1:], c[:-1], out=mask[1:])
            first = False
        else:
            mask[1:] |= c[1:] != c[:-1]
    return mask


def unique_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The distinct rows of ``columns``, sorted."""
    if len(columns[0]) <= 1:
        return tuple(columns)
    layout = _layout(columns)
    if layout is not None:  # sort the packed values themselves and unpack the distinct ones
        lows, widths = layout
        key = np.sort(_pack(columns, lows, widths))
        key = key.compress(starts((key,)))
        out = []
        shift = sum(widths)
        for lo, w in zip(lows, widths):
            shift -= w
            part = (key >> shift) & ((1 << w) - 1) if w else np.zeros(len(key), dtype=np.int64)
            out.append(part + lo if lo else part)
        return tuple(out)
    o = order(columns)
    cols = [c.take(o) for c in columns]
    keep = starts(cols)
    return tuple(c.compress(keep) for c in cols)


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an int64 array: one SIMD sort and an adjacent compare
    (``numpy.unique``'s hash-based path is many times slower on large int64 arrays)."""
    if len(values) <= 1:
        return np.asarray(values, dtype=np.int64).copy()
    s = np.sort(values)
    return s.compress(starts((s,)))


def ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniq, inverse)``: the sorted distinct values and each value's index among them
    (``numpy.unique(values, return_inverse=True)`` by one sort and one search)."""
    if len(values) == 0:
        return EMPTY, EMPTY
    s = np.sort(values)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    uniq = s.compress(keep)
    return uniq, np.searchsorted(uniq, values)


# -- the compiled merge sort of rows --------------------------------------------------------------


@helper
def _row_less(keys, i, j):
    """Row ``i`` of ``keys`` lexicographically before row ``j``."""
    for c in range(keys.shape[1]):
        if keys[i, c] != keys[j, c]:
            return keys[i, c] < keys[j, c]
    return False


@helper
def merge_order(keys):
    """The permutation that orders the rows of ``keys`` (an ``(n, c)`` int64 array, C-contiguous)
    lexicographically, equal rows in index order (stable): a bottom-up merge sort of row numbers.

    The kernels that sort rows by a comparison (a reduction's points by their order value, its output
    terms by ``(out, time)``, a history's rows by ``(val, time)``) gather their sort keys into such an
    array and share this one body; short runs they sort in place themselves. Reference:
    :func:`merge_order_reference`."""
    n = keys.shape[0]
    a = np.arange(n)
    b = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if _row_less(keys, a[j], a[i]):
                    b[o] = a[j]
                    j += 1
                else:
                    b[o] = a[i]
                    i += 1
                o += 1
            while i < mid:
                b[o] = a[i]
                i += 1
                o += 1
            while j < hi:
                b[o] = a[j]
                j += 1
                o += 1
        a, b = b, a
        width *= 2
    return a


def merge_order_reference(keys: np.ndarray) -> np.ndarray:
    """:func:`merge_order` with numpy: a stable lexicographic argsort of the rows."""
    return np.lexsort(keys.T[::-1]).astype(np.int64) if keys.shape[1] else np.arange(len(keys), dtype=np.int64)


# -- the compiled radix sort ------------------------------------------------------------------------

SMALL = 16  # buckets up to this size are insertion-sorted
FINISH = 1024  # buckets up to this size get one last scatter, then an insertion sort of nearly sorted keys
DIGIT = 8  # bits per scatter: 256 buckets, whose write positions stay in the L1 cache
_STACK = (64 // DIGIT + 2) * (1 << DIGIT)  # depth-first: at most 255 pending buckets per level


@helper
def _insertion(keys, vals, lo, hi):
    for i in range(lo + 1, hi):
        k = keys[i]
        if vals is not None:
            v = vals[i]
        j = i - 1
        while j >= lo and keys[j] > k:
            keys[j + 1] = keys[j]
            if vals is not None:
                vals[j + 1] = vals[j]
            j -= 1
        keys[j + 1] = k
        if vals is not None:
            vals[j + 1] = v


@helper
def _back(keys, vals, buf, vbuf, lo, hi):
    """Copy rows ``lo .. hi`` of the buffers back into ``keys`` (and ``vals``). A loop: a slice
    assignment from an array would compile numba's shape-mismatch message (string formatting) into
    every kernel that sorts."""
    for i in range(lo, hi):
        keys[i] = buf[i]
        if vals is not None:
            vals[i] = vbuf[i]


@helper
def msd_sort(keys, vals, buf, vbuf, lo_bit, hi_bit):
    """:func:`radix_sort` with its buffers: ``buf`` (uint64) and ``vbuf`` (int64, or ``None`` with
    ``vals``) at least as long as ``keys``; their contents are overwritten."""
    n = len(keys)
    if n <= 1 or hi_bit <= lo_bit:
        return
    st_lo = np.empty(_STACK, dtype=np.int64)
    st_hi = np.empty(_STACK, dtype=np.int64)
    st_top = np.empty(_STACK, dtype=np.int64)
    st_buf = np.empty(_STACK, dtype=np.bool_)
    counts = np.empty((1 << DIGIT) + 1, dtype=np.int64)
    starts = np.empty((1 << DIGIT) + 1, dtype=np.int64)
    st_lo[0], st_hi[0], st_top[0], st_buf[0] = 0, n, hi_bit, False
    sp = 1
    while sp > 0:
        sp -= 1
        lo, hi, top, in_buf = st_lo[sp], st_hi[sp], st_top[sp], st_buf[sp]
        src = buf if in_buf else keys
        dst = keys if in_buf else buf
        sv = vbuf if in_buf else vals
        dv = vals if in_buf else vbuf
        size = hi - lo
        if size <= SMALL:
            _insertion(src, sv, lo, hi)
            if in_buf:
                _back(keys, vals, buf, vbuf, lo, hi)
            continue
        # the first digit (of at most DIGIT bits, from ``top`` down) on which the keys differ
        w = DIGIT
        while True:
            w = min(w, top - lo_bit)
            sh = uint64(top - w)
            m = uint64((1 << w) - 1)
            counts[: (1 << w) + 1] = 0
            for i in range(lo, hi):
                counts[np.int64((src[i] >> sh) & m) + 1] += 1
            if counts[np.int64((src[lo] >> sh) & m) + 1] != size:
                break
            top -= w
            if top <= lo_bit:
                break
        if top <= lo_bit:  # all keys equal
            if in_buf:
                _back(keys, vals, buf, vbuf, lo, hi)
            continue
        counts[0] = lo
        for x in range(1 << w):
            counts[x + 1] += counts[x]
        finish = size <= FINISH
        if not finish:
            for x in range((1 << w) + 1):
                starts[x] = counts[x]
        for i in range(lo, hi):
            k = src[i]
            x = np.int64((k >> sh) & m)
            p = counts[x]
            dst[p] = k
            if vals is not None:
                dv[p] = sv[i]
            counts[x] = p + 1
        if finish:  # nearly sorted now: an insertion sort finishes the bucket
            if top - w > lo_bit:
                _insertion(dst, dv, lo, hi)
            if not in_buf:
                _back(keys, vals, buf, vbuf, lo, hi)
            continue
        for x in range((1 << w) - 1, -1, -1):
            s, e = starts[x], starts[x + 1]
            if e - s == 1:
                if not in_buf:
                    keys[s] = buf[s]
                    if vals is not None:
                        vals[s] = vbuf[s]
            elif e > s:
                st_lo[sp], st_hi[sp], st_top[sp], st_buf[sp] = s, e, top - w, not in_buf
                sp += 1


def radix_sort(keys: np.ndarray, vals: np.ndarray | None = None, lo_bit: int = 0, hi_bit: int = 64) -> None:
    """Sort ``keys`` (uint64, C-contiguous) in place by their bits ``[lo_bit, hi_bit)``; ``vals``
    (int64, C-contiguous, the same length) move with their keys, or ``None``.

    Contract: bits at and above ``hi_bit`` are equal in every key (e.g. zero). Bits below ``lo_bit``
    are a payload: they travel with the key, and keys equal in ``[lo_bit, hi_bit)`` come out in any
    order (not stable). Most significant digit first: 8-bit counting scatters until a bucket holds at
    most ``FINISH`` keys, then one more scatter and an insertion sort of the nearly sorted bucket;
    digits on which a bucket's keys all agree are skipped (equal keys cost a counting pass per digit).
    Sorting keys alone is about twice as fast as with ``vals``: pack a payload below ``lo_bit`` when
    it fits. Compiled callers call :func:`msd_sort` with buffers of their own."""
    n = len(keys)
    if n <= 1 or hi_bit <= lo_bit:
        return
    # buffers from numpy, which asks the kernel for huge pages: first-touch page faults of a buffer
    # allocated inside a kernel cost as much as a scatter pass
    sort_kernel(keys, vals, np.empty(n, dtype=np.uint64), None if vals is None else np.empty(n, dtype=np.int64),
                lo_bit, hi_bit)


@kernel
def sort_kernel(keys, vals, buf, vbuf, lo_bit, hi_bit):
    """:func:`msd_sort` as an entry point from Python (see :func:`radix_sort`)."""
    msd_sort(keys, vals, buf, vbuf, lo_bit, hi_bit)
