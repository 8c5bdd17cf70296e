"""Consolidation: updates sorted by (data, time), the diffs of equal rows summed, zeros dropped.

A row is its data columns (most significant first) followed by its time coordinates; consolidation
changes no accumulation at any time. :func:`consolidate` does it in one compiled call whatever the
number of data columns or time coordinates:

1. one pass finds each column's range; when the ranges fit together in 64 bits with the diff's, each
   row packs into one uint64 ``(c0 - lo0) << … | … | (diff - dlo)`` whose order is the rows' order,
   the diff riding below the key as a payload;
2. a radix sort of the packed keys (:func:`ddflow.operators.kernels.sorting.msd_sort`), skipped when
   the rows are already in order;
3. one pass sums the diffs of each run of equal keys and unpacks every output column at once.

When the ranges do not fit (:func:`consolidate_wide`), the widest columns are replaced by their dense
ranks (one sort each; order-preserving, so equal rows keep equal keys) until the row fits in 64 bits,
the sort carries row indices, and the output gathers the original columns.

Sums are exact: a run whose diffs accumulate outside int64 is never wrapped; :func:`consolidate`
raises :class:`SumOverflow` naming the row. :func:`add` is the checked addition other kernels use for
their own sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import int64, uint64

from . import helper, kernel
from .sorting import msd_sort

UNCHANGED, DONE, OVERFLOW, WIDE = 0, 1, 2, 3  # kernel status (see :func:`consolidate_kernel`)
EMPTY = np.empty(0, dtype=np.int64)
_INT64 = np.dtype(np.int64)


class SumOverflow(ArithmeticError):
    """The diffs of one row (``data`` tuple, ``time`` tuple) sum to a value outside int64."""

    def __init__(self, data: tuple[int, ...], time: tuple[int, ...]) -> None:
        super().__init__(f"the diffs of data {data} at time {time} sum outside int64")
        self.data, self.time = data, time


# -- building blocks (compiled; callable from other kernels) --------------------------------------


@helper
def add(total, carry, x):
    """``total + x`` wrapped to int64, and ``carry`` counting the wraps: the exact sum is
    ``total + carry * 2**64``, inside int64 exactly when ``carry == 0`` at the end of a sum (a sum may
    leave int64 midway and come back: ``2**62 + 2**62 - 2**62`` is exact)."""
    s = total + x
    if ((total ^ s) & (x ^ s)) < 0:  # both operands' sign differs from the result's: wrapped
        carry += 1 if x > 0 else -1
    return s, carry


@helper
def bit_length(x):
    """Bits needed for the uint64 ``x`` (0 for 0)."""
    b = 0
    while x:
        x >>= uint64(1)
        b += 1
    return b


@helper
def _mask(w):
    return uint64(0xFFFFFFFFFFFFFFFF) if w >= 64 else (uint64(1) << uint64(w)) - uint64(1)


@helper
def _min_max(a):
    mn = a[0]
    mx = a[0]
    for i in range(1, len(a)):
        v = a[i]
        mn = min(mn, v)
        mx = max(mx, v)
    return mn, mx


@helper
def _bounds(data, times, diffs):
    """``(lo, hi)``: per column (data rows, then time coordinates, then the diffs) least and greatest."""
    k, n = data.shape
    d = times.shape[1]
    lo = np.empty(k + d + 1, dtype=np.int64)
    hi = np.empty(k + d + 1, dtype=np.int64)
    for j in range(k):
        lo[j], hi[j] = _min_max(data[j])
    for c in range(d):
        mn = times[0, c]
        mx = mn
        for i in range(1, n):
            v = times[i, c]
            mn = min(mn, v)
            mx = max(mx, v)
        lo[k + c], hi[k + c] = mn, mx
    lo[k + d], hi[k + d] = _min_max(diffs)
    return lo, hi


@helper
def _column(data, times, j, i):
    """Row ``i`` of column ``j`` (data rows first, then time coordinates)."""
    k = data.shape[0]
    return data[j, i] if j < k else times[i, j - k]


# -- packed path: the row and its diff in one uint64 ----------------------------------------------


@helper
def _pack(data, times, diffs, lo, widths, dw, keys):
    """Pack each row into ``keys``; returns ``(ordered, plain)``: the keys are already in order, and
    moreover distinct with non-zero diffs (the input is consolidated as it is)."""
    k, n = data.shape
    m = k + times.shape[1]
    dlo = uint64(lo[m])
    for i in range(n):
        keys[i] = uint64(diffs[i]) - dlo
    shift = dw
    for j in range(m - 1, -1, -1):
        w = widths[j]
        if w == 0:
            continue
        low = uint64(lo[j])
        sh = uint64(shift)
        if j < k:
            a = data[j]
            for i in range(n):
                keys[i] |= (uint64(a[i]) - low) << sh
        else:
            c = j - k
            for i in range(n):
                keys[i] |= (uint64(times[i, c]) - low) << sh
        shift += w
    if dw >= 64:  # no key bits: every row is equal
        return True, False
    sh = uint64(dw)
    equal = 0
    for i in range(1, n):
        a, b = keys[i - 1] >> sh, keys[i] >> sh
        if b < a:
            return False, False
        equal += a == b
    if equal:
        return True, False
    for i in range(n):
        if diffs[i] == 0:
            return True, False
    return True, True


@helper
def _sum_packed(keys, runs, data, times, lo, widths, dw, od, ot, odf):
    """Sum the diffs of each run of equal (sorted) keys, and unpack the outputs; ``(rows, status)``.
    ``runs`` (uint64, as long as ``keys``) is scratch space; it may be ``keys`` itself (each run is
    written at or below where it was read)."""
    n = len(keys)
    k = data.shape[0]
    m = len(widths)
    dlo = uint64(lo[m])
    dmask = _mask(dw)
    sh = uint64(dw if dw < 64 else 0)
    kmask = uint64(0) if dw >= 64 else uint64(0xFFFFFFFFFFFFFFFF)
    r = 0
    first = keys[0]
    prev = (first >> sh) & kmask
    total = int64(dlo + (first & dmask))
    carry = 0
    for i in range(1, n):
        kk = keys[i]
        key = (kk >> sh) & kmask
        x = int64(dlo + (kk & dmask))
        if key == prev:
            total, carry = add(total, carry, x)
            continue
        if carry != 0:
            break
        runs[r] = first
        odf[r] = total
        r += total != 0
        first, prev, total, carry = kk, key, x, 0
    if carry != 0:
        runs[0] = first
        r = 1
    else:
        runs[r] = first
        odf[r] = total
        r += total != 0
    shift = dw
    for j in range(m - 1, -1, -1):
        w = widths[j]
        low = uint64(lo[j])
        if w == 0:
            if j < k:
                od[j, :r] = lo[j]
            else:
                ot[:r, j - k] = lo[j]
            continue
        s = uint64(shift)
        mk = _mask(w)
        if j < k:
            for i in range(r):
                od[j, i] = int64(low + ((runs[i] >> s) & mk))
        else:
            c = j - k
            for i in range(r):
                ot[i, c] = int64(low + ((runs[i] >> s) & mk))
        shift += w
    return r, OVERFLOW if carry != 0 else DONE


# -- general path: ranks, and row indices carried by the sort --------------------------------------


@helper
def _dense_ranks(keys, vals, out):
    """Given sorted ``keys`` with their row indices ``vals``, write each row's dense rank into
    ``out``; returns the number of distinct keys."""
    r = -1
    prev = uint64(0)
    for i in range(len(keys)):
        if i == 0 or keys[i] != prev:
            r += 1
            prev = keys[i]
        out[vals[i]] = r
    return r + 1


@helper
def _sort_rows(cols, lo, widths, a, b, keys, buf, vals, vbuf):
    """Sort the rows of the packed columns ``cols[a:b]`` (their widths summing to at most 64 bits),
    their row indices in ``vals``."""
    n = cols.shape[1]
    total = 0
    for j in range(a, b):
        total += widths[j]
    for i in range(n):
        keys[i] = uint64(0)
        vals[i] = i
    shift = 0
    for j in range(b - 1, a - 1, -1):
        w = widths[j]
        if w == 0:
            continue
        low = uint64(lo[j])
        sh = uint64(shift)
        for i in range(n):
            keys[i] |= (uint64(cols[j, i]) - low) << sh
        shift += w
    msd_sort(keys, vals, buf, vbuf, 0, total)


@helper
def _row_less(data, times, a, b):
    """-1, 0 or 1: row ``a`` before, equal to or after row ``b`` (data rows, then time coordinates)."""
    for j in range(data.shape[0]):
        if data[j, a] != data[j, b]:
            return -1 if data[j, a] < data[j, b] else 1
    for c in range(times.shape[1]):
        if times[a, c] != times[b, c]:
            return -1 if times[a, c] < times[b, c] else 1
    return 0


@kernel
def consolidate_wide(data, times, diffs, out):
    """:func:`consolidate_kernel` for rows that do not fit in 64 bits with their diffs (a kernel of
    its own: compiled only when first needed)."""
    k, n = data.shape
    d = times.shape[1]
    m = k + d
    od = out[: k * n].reshape((k, n))
    ot = out[k * n : (k + d) * n].reshape((n, d))
    odf = out[(k + d) * n : (k + d + 1) * n]
    lo, hi = _bounds(data, times, diffs)
    ordered = True
    plain = True
    for i in range(n):
        if diffs[i] == 0:
            plain = False
    for i in range(1, n):
        c = _row_less(data, times, i - 1, i)
        if c > 0:
            ordered = False
            plain = False
            break
        if c == 0:
            plain = False
    if plain:
        return n, UNCHANGED
    perm = np.arange(n)
    if not ordered:
        ib = bit_length(uint64(n - 1))
        cols = np.empty((m, n), dtype=np.int64)
        low = lo[:m].copy()
        widths = np.empty(m, dtype=np.int64)
        for j in range(m):
            for i in range(n):
                cols[j, i] = _column(data, times, j, i)
            widths[j] = bit_length(uint64(hi[j]) - uint64(lo[j]))
        keys = np.empty(n, dtype=np.uint64)
        buf = np.empty(n, dtype=np.uint64)
        vals = np.empty(n, dtype=np.int64)
        vbuf = np.empty(n, dtype=np.int64)
        ranks = np.empty(n, dtype=np.int64)
        while widths.sum() > 64:
            # rank the widest column that ranks would narrow, else fold the last two into one
            j = -1
            for c in range(m):
                if widths[c] > ib and (j < 0 or widths[c] > widths[j]):
                    j = c
            if j >= 0:
                _sort_rows(cols, low, widths, j, j + 1, keys, buf, vals, vbuf)
                distinct = _dense_ranks(keys, vals, ranks)
                for i in range(n):  # a loop: see kernels.sorting._back
                    cols[j, i] = ranks[i]
                low[j] = 0
                widths[j] = bit_length(uint64(distinct - 1))
                continue
            b = m - 1
            while widths[b] == 0:
                b -= 1
            a = b - 1
            while widths[a] == 0:
                a -= 1
            _sort_rows(cols, low, widths, a, b + 1, keys, buf, vals, vbuf)
            distinct = _dense_ranks(keys, vals, ranks)
            for i in range(n):  # a loop: see kernels.sorting._back
                cols[a, i] = ranks[i]
            low[a] = 0
            widths[a] = bit_length(uint64(distinct - 1))
            for c in range(a + 1, b + 1):
                widths[c] = 0
        _sort_rows(cols, low, widths, 0, m, keys, buf, vals, vbuf)
        perm = vals
    r = 0
    i = 0
    while i < n:
        first = perm[i]
        total = diffs[first]
        carry = 0
        j = i + 1
        while j < n and _row_less(data, times, first, perm[j]) == 0:
            total, carry = add(total, carry, diffs[perm[j]])
            j += 1
        if carry != 0 or total != 0:
            row = 0 if carry != 0 else r
            for c in range(k):
                od[c, row] = data[c, first]
            for c in range(d):
                ot[row, c] = times[first, c]
            if carry != 0:
                return 1, OVERFLOW
            odf[r] = total
            r += 1
        i = j
    return r, DONE


# -- the kernel and its Python entry ---------------------------------------------------------------


@kernel
def consolidate_kernel(data, times, diffs, scratch, out):
    """Consolidate ``(data, times, diffs)``: ``data`` a (k, n) int64 array (one row per data column),
    ``times`` (n, d), ``diffs`` (n,), all C-contiguous. ``scratch`` (uint64, at least n) and ``out``
    (int64, at least (k + d + 1) n) are the kernel's buffers: on return ``out`` holds the (k, n) output
    data block, then the (n, d) times block, then the diffs, each filled up to the returned row count.

    Returns ``(rows, status)``: ``DONE``; ``UNCHANGED`` (the input is consolidated as it is: sorted,
    distinct, no zero diff; nothing written); ``OVERFLOW`` (the diffs of the row written as output row
    0 sum outside int64); ``WIDE`` (the rows do not fit in 64 bits with their diffs: nothing done,
    call :func:`consolidate_wide`)."""
    k, n = data.shape
    d = times.shape[1]
    od = out[: k * n].reshape((k, n))
    ot = out[k * n : (k + d) * n].reshape((n, d))
    odf = out[(k + d) * n : (k + d + 1) * n]
    lo, hi = _bounds(data, times, diffs)
    m = k + d
    widths = np.empty(m, dtype=np.int64)
    total = 0
    for j in range(m):
        widths[j] = bit_length(uint64(hi[j]) - uint64(lo[j]))
        total += widths[j]
    dw = bit_length(uint64(hi[m]) - uint64(lo[m]))
    if total + dw > 64:
        return 0, WIDE
    keys = scratch[:n]
    ordered, plain = _pack(data, times, diffs, lo, widths, dw, keys)
    if plain:
        return n, UNCHANGED
    if not ordered:  # the output's first column is the sort's buffer
        msd_sort(keys, None, out[:n].view(np.uint64), None, dw, dw + total)
    return _sum_packed(keys, keys, data, times, lo, widths, dw, od, ot, odf)


def _consolidate_kernel_in_python(data, times, diffs, scratch, out):
    """:func:`consolidate_kernel` for a first run that runs the kernels as Python while they compile
    (``interpreted``): the same statuses and output, by numpy's stable sort of the rows instead of
    the radix sort of their packed keys; a batch whose diffs could sum outside int64 goes through
    the kernel's own Python (where a sum overflows is its to tell)."""
    k, n = data.shape
    d = times.shape[1]
    columns = [data[j] for j in range(k)] + [times[:, c] for c in range(d)]
    total = sum((int(c.max()) - int(c.min())).bit_length() for c in columns)
    if total + (int(diffs.max()) - int(diffs.min())).bit_length() > 64:
        return 0, WIDE
    if not sums_fit(n, diffs):
        from .interpreted import python_of

        return python_of(consolidate_kernel)(data, times, diffs, scratch, out)
    order = np.lexsort(columns[::-1])
    ordered = [c.take(order) for c in columns]
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in ordered:
        change[1:] |= c[1:] != c[:-1]
    if change.all() and (order == np.arange(n)).all() and diffs.all():
        return n, UNCHANGED
    starts = np.flatnonzero(change)
    sums = np.add.reduceat(diffs.take(order), starts)
    nonzero = sums != 0
    keep = starts[nonzero]
    r = len(keep)
    for j in range(k):
        out[j * n : j * n + r] = ordered[j].take(keep)
    ot = out[k * n : (k + d) * n].reshape((n, d))
    for c in range(d):
        ot[:r, c] = ordered[k + c].take(keep)
    out[(k + d) * n : (k + d) * n + r] = sums[nonzero]
    return r, DONE


consolidate_kernel.python_twin = _consolidate_kernel_in_python


def consolidate(data: Sequence[np.ndarray], times: np.ndarray, diffs: np.ndarray
                ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray] | None:
    """``(data, times, diffs)`` consolidated: sorted by (data columns, time coordinates), one row per
    distinct (data, time) with the sum of its diffs, zero sums dropped. ``None`` when the input is
    consolidated already (sorted, distinct, no zero diff): the caller keeps what it has.

    ``data``: int64 columns of equal length ``n``; ``times``: (n, d) int64; ``diffs``: (n,) int64.
    The output columns are views of one new buffer. Raises :class:`SumOverflow` when the diffs of a
    row sum outside int64."""
    n = diffs.shape[0]
    k = 1 if data and not data[1:] else len(data)  # (one column, the common case: no len() call)
    d = times.shape[1]
    if n == 0:
        return None
    if n == 1:
        if diffs[0] != 0:
            return None
        return tuple(EMPTY for _ in range(k)), np.empty((0, d), dtype=np.int64), EMPTY
    if k == 1:
        c = data[0]
        if c.dtype != _INT64 or not c.flags.c_contiguous:
            c = np.ascontiguousarray(c, dtype=np.int64)
        block = c[None, :]  # the column as a (1, n) view
    else:
        block = np.empty((k, n), dtype=np.int64)
        for j, c in enumerate(data):
            block[j] = c
    if times.dtype != _INT64 or not times.flags.c_contiguous:  # the kernel's types (one specialisation)
        times = np.ascontiguousarray(times, dtype=np.int64)
    if diffs.dtype != _INT64 or not diffs.flags.c_contiguous:
        diffs = np.ascontiguousarray(diffs, dtype=np.int64)
    scratch = np.empty(n, dtype=np.uint64)
    out = np.empty((k + d + 1) * n, dtype=np.int64)
    rows, status = consolidate_kernel(block, times, diffs, scratch, out)
    if status == WIDE:
        rows, status = consolidate_wide(block, times, diffs, out)
    if status == UNCHANGED:
        return None
    if status == OVERFLOW:
        raise SumOverflow(tuple(int(out[j * n]) for j in range(k)), tuple(out[k * n : k * n + d].tolist()))
    if 2 * rows < n:  # mostly cancelled: keep only what is used
        out_data = (out[:rows].copy(),) if k == 1 else tuple(out[j * n : j * n + rows].copy() for j in range(k))
        return out_data, out[k * n : k * n + rows * d].reshape(rows, d).copy(), out[(k + d) * n :][:rows].copy()
    if k == 1:  # (one data column, or two: no generator to step through)
        out_data = (out[:rows],)
    elif k == 2:
        out_data = (out[:rows], out[n : n + rows])
    else:
        out_data = tuple(out[j * n : j * n + rows] for j in range(k))
    return out_data, out[k * n : k * n + rows * d].reshape(rows, d), out[(k + d) * n : (k + d) * n + rows]


# -- reference ---------------------------------------------------------------------------------------


def consolidate_reference(data: Sequence[np.ndarray], times: np.ndarray, diffs: np.ndarray
                          ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """The contract of :func:`consolidate` in plain Python: exact sums in Python ints, a dict, a sort.
    Returns the consolidated columns (never ``None``)."""
    k, d = len(data), times.shape[1]
    sums: dict[tuple, int] = {}
    rows = zip(*(c.tolist() for c in data), times.tolist(), diffs.tolist()) if k else ()
    for row in rows:
        key = (tuple(row[:k]), tuple(row[k]))
        sums[key] = sums.get(key, 0) + row[k + 1]
    for (dat, tim), total in sorted(sums.items()):
        if not -(2**63) <= total < 2**63:
            raise SumOverflow(dat, tim)
    out = [(dat, tim, total) for (dat, tim), total in sorted(sums.items()) if total]
    return (tuple(np.array([r[0][j] for r in out], dtype=np.int64) for j in range(k)),
            np.array([r[1] for r in out], dtype=np.int64).reshape(len(out), d),
            np.array([r[2] for r in out], dtype=np.int64))


# -- checks for sums done by numpy ---------------------------------------------------------------------

INT64_LIMIT = 1 << 63


def magnitude(a: np.ndarray) -> int:
    """The largest ``|x|`` of an int64 column as a Python int (``2**63`` for the least int64)."""
    return max(int(a.max()), -int(a.min())) if len(a) else 0


def sums_fit(terms: int, *columns: np.ndarray) -> bool:
    """True when every sum of at most ``terms`` values of ``columns`` or their negations fits int64: a
    bound (two reductions per column) under which numpy may add, subtract and negate them unchecked.
    When it fails, the caller sums exactly (Python ints) and refuses results outside int64."""
    return terms * max((magnitude(c) for c in columns), default=0) < INT64_LIMIT


def outside_int64(values: np.ndarray) -> np.ndarray:
    """Mask of the exact (object dtype, Python int) ``values`` that int64 cannot hold."""
    return np.array([not -INT64_LIMIT <= v < INT64_LIMIT for v in values.tolist()], dtype=bool)
