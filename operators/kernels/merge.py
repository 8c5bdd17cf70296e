"""Merging two trie batches: times advanced by a frontier and consolidated, in one linear pass, fueled.

A *merge* combines an older and a newer trie (see :mod:`.trie`) into one: for every key in either
(ascending), every val in either (ascending), the two histories are concatenated, each time ``s`` is
advanced by the compaction frontier ``F`` to ``advance(s, F) = meet over f in F of join(s, f)``
(coordinate-wise: ``min_f max(s, f)``; an empty ``F`` leaves ``s`` as it is), equal times are summed
and zero sums dropped; vals and keys left with no update are dropped too. The result is a trie of the
same layout.

A merge runs in steps: each step is given *fuel* and processes whole keys until it has read at least
``fuel`` input updates (or the inputs are exhausted), so its work can be spread over many insertions
of a trace. The frontier may move forward between steps: each key is advanced by the frontier of the
step that processes it.

A merge in progress is one int64 buffer (set up by :func:`begin`): a header of ``HEADER`` values
(inputs, cursors, status) followed by the output trie laid out with room for every input update. When
the last key is processed the output is packed to the exact trie layout in place, starting right
after the header. :func:`work` steps any number of merges in one call, given the addresses of their
buffers. Sums of diffs are exact: a sum outside int64 stops the merge with status ``OVERFLOW`` and
the offending key and val in the header (the caller raises; nothing wraps).
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel
from .address import column
from .trie import LAYOUT, regions, tables, write_radix

if LAYOUT != 2:  # the trie layout these kernels were compiled for (see kernels.trie.LAYOUT)
    raise ImportError(f"{__name__} inlines trie layout 2, kernels.trie has {LAYOUT}: update both")

# header fields of a merge buffer
OLDER = 0  # 0..3: address, nk, nv, n of the older trie
NEWER = 4  # 4..7: the same for the newer trie
POS_OLDER, POS_NEWER = 8, 9  # next key of each input
OUT_KEYS, OUT_VALS, OUT_UPDATES = 10, 11, 12  # output written so far
WORK = 13  # input updates processed so far
STATUS = 14
BAD_KEY, BAD_VAL = 15, 16  # where a sum left int64 (status OVERFLOW)
DEPTH = 17
HEADER = 18

RUNNING, DONE, OVERFLOW = 0, 1, 2

_jit = numba.njit(cache=True, nogil=True)
_inline = numba.njit(cache=True, nogil=True, inline="always")


@_inline
def _start(buffer, a_address, a_nk, a_nv, a_n, b_address, b_nk, b_nv, b_n, depth):
    buffer[:HEADER] = 0
    buffer[OLDER], buffer[OLDER + 1], buffer[OLDER + 2], buffer[OLDER + 3] = a_address, a_nk, a_nv, a_n
    buffer[NEWER], buffer[NEWER + 1], buffer[NEWER + 2], buffer[NEWER + 3] = b_address, b_nk, b_nv, b_n
    buffer[DEPTH] = depth


@kernel
def begin(buffer, a_address, a_nk, a_nv, a_n, b_address, b_nk, b_nv, b_n, depth):
    """Start a merge of the older trie ``a`` into the newer ``b`` (by address and sizes) in ``buffer``
    (int64, at least ``HEADER + size(a_nk + b_nk, a_nv + b_nv, a_n + b_n, depth)`` long: room for
    every key, val and update of both): writes the header, returns the buffer's address."""
    _start(buffer, a_address, a_nk, a_nv, a_n, b_address, b_nk, b_nv, b_n, depth)
    return buffer.ctypes.data


@_inline
def _add(total, carry, x):
    """``total + x`` wrapping, with ``carry`` counting wraps (+1 up, -1 down): exact two-word sums."""
    s = np.int64(np.uint64(total) + np.uint64(x))
    if ((total ^ s) & (x ^ s)) < 0:
        carry += 1 if x >= 0 else -1
    return s, carry


@_inline
def _compare(rows, i, j, d):
    """-1, 0 or 1 as the time of update row ``i`` is lexicographically below, equal to or above row ``j``'s."""
    for c in range(d):
        if rows[i, c] != rows[j, c]:
            return -1 if rows[i, c] < rows[j, c] else 1
    return 0


@_inline
def _sort_rows(rows, lo, hi, d):
    """Sort update rows ``lo .. hi`` by time: a natural merge sort, nothing to do when they are sorted
    and linear when they are a few sorted runs (the histories of two batches)."""
    first = lo + 1
    while first < hi and _compare(rows, first - 1, first, d) <= 0:
        first += 1
    if first < hi:  # not already sorted (the common case is): sorted in a call of its own, so that
        _merge_runs(rows, lo, hi, d, first)  # the merge's loop holds no array it allocates


@_jit
def _merge_runs(rows, lo, hi, d, first):
    """:func:`_sort_rows` for rows ``lo .. hi`` whose first sorted run ends at ``first``."""
    runs = np.empty(hi - lo + 1, np.int64)
    runs[0] = lo
    runs[1] = first
    count = 1
    for r in range(first + 1, hi):
        if _compare(rows, r - 1, r, d) > 0:
            count += 1
            runs[count] = r
    count += 1
    runs[count] = hi
    src = np.arange(lo, hi)
    dst = np.empty(hi - lo, np.int64)
    while count > 1:
        merged = 0
        for p in range(0, count, 2):
            s, m = runs[p], runs[p + 1]
            e = runs[p + 2] if p + 2 <= count else m
            i, j, w = s, m, s
            while i < m and j < e:
                if _compare(rows, src[i - lo], src[j - lo], d) <= 0:
                    dst[w - lo] = src[i - lo]
                    i += 1
                else:
                    dst[w - lo] = src[j - lo]
                    j += 1
                w += 1
            while i < m:
                dst[w - lo] = src[i - lo]
                i += 1
                w += 1
            while j < e:
                dst[w - lo] = src[j - lo]
                j += 1
                w += 1
            runs[merged] = s
            merged += 1
        runs[merged] = hi
        count = merged
        src, dst = dst, src
    copy = rows[lo:hi].copy()
    for r in range(hi - lo):
        for c in range(d + 1):
            rows[lo + r, c] = copy[src[r] - lo, c]


@_inline
def _consolidate_rows(rows, lo, hi, d):
    """Sum the diffs of update rows with equal times among the sorted rows ``lo .. hi`` and drop zero
    sums, packing the rest from ``lo``; the new end, or ``-1`` when a sum leaves int64."""
    w = lo
    r = lo
    while r < hi:
        total, carry = rows[r, d], 0
        e = r + 1
        while e < hi and _compare(rows, e, r, d) == 0:
            total, carry = _add(total, carry, rows[e, d])
            e += 1
        if carry != 0:
            return -1
        if total != 0:
            if w != r:
                for c in range(d):
                    rows[w, c] = rows[r, c]
            rows[w, d] = total
            w += 1
        r = e
    return w


@_inline
def _advance_into(rows, r0, r1, out, w, frontier, d):
    """Copy update rows ``r0 .. r1`` to ``w ..`` of ``out`` with times advanced by ``frontier``."""
    m = frontier.shape[0]
    for r in range(r0, r1):
        for c in range(d):
            t = rows[r, c]
            if m > 0:
                best = max(t, frontier[0, c])
                for f in range(1, m):
                    best = min(best, max(t, frontier[f, c]))
                t = best
            out[w, c] = t
        out[w, d] = rows[r, d]
        w += 1
    return w


@_jit
def _step(h, a, b, out, frontier, fuel, d):
    """Process whole keys of the merge with header ``h`` until ``fuel`` input updates are read or the
    inputs end; the updates read, or ``-1`` on overflow (header then at the offending key). ``a``,
    ``b``, ``out``: the ``(keys, key_offs, vals, updates)`` of the inputs and of the output."""
    ak, ako, av, au = a
    bk, bko, bv, bu = b
    ok, oko, ov, ou = out
    pa, pb = h[POS_OLDER], h[POS_NEWER]
    nk, nv, n = h[OUT_KEYS], h[OUT_VALS], h[OUT_UPDATES]
    na, nb = len(ak), len(bk)
    read = 0
    while read < fuel and (pa < na or pb < nb):
        use_a = pa < na and (pb >= nb or ak[pa] <= bk[pb])
        use_b = pb < nb and (pa >= na or bk[pb] <= ak[pa])
        key = ak[pa] if use_a else bk[pb]
        i, ie = (ako[pa], ako[pa + 1]) if use_a else (0, 0)
        j, je = (bko[pb], bko[pb + 1]) if use_b else (0, 0)
        first_val = nv
        while i < ie or j < je:
            take_a = i < ie and (j >= je or av[i, 0] <= bv[j, 0])
            take_b = j < je and (i >= ie or bv[j, 0] <= av[i, 0])
            val = av[i, 0] if take_a else bv[j, 0]
            start = n
            if take_a:
                n = _advance_into(au, av[i, 1], av[i + 1, 1], ou, n, frontier, d)
                i += 1
            if take_b:
                n = _advance_into(bu, bv[j, 1], bv[j + 1, 1], ou, n, frontier, d)
                j += 1
            read += n - start
            if n - start > 1:
                _sort_rows(ou, start, n, d)
                n = _consolidate_rows(ou, start, n, d)
            if n < 0:
                h[BAD_KEY], h[BAD_VAL] = key, val
                h[POS_OLDER], h[POS_NEWER] = pa, pb
                return -1
            if n > start:
                ov[nv, 0] = val
                ov[nv, 1] = start
                nv += 1
        if nv > first_val:
            ok[nk] = key
            oko[nk] = first_val
            nk += 1
        pa += 1 if use_a else 0
        pb += 1 if use_b else 0
    h[POS_OLDER], h[POS_NEWER] = pa, pb
    h[OUT_KEYS], h[OUT_VALS], h[OUT_UPDATES] = nk, nv, n
    h[WORK] += read
    return read


@_jit
def _union_sizes(a, b):
    """``(keys, (key, val) pairs)`` in the union of the tries whose tables are ``a`` and ``b``: what a
    merge of the two writes unless some val's updates cancel out."""
    ak, ako, av, _ = a
    bk, bko, bv, _ = b
    na, nb = len(ak), len(bk)
    i = j = nk = nv = 0
    while i < na or j < nb:
        if j >= nb or (i < na and ak[i] < bk[j]):
            nv += ako[i + 1] - ako[i]
            i += 1
        elif i >= na or bk[j] < ak[i]:
            nv += bko[j + 1] - bko[j]
            j += 1
        else:  # a key of both: the union of its vals
            x, xe, y, ye = ako[i], ako[i + 1], bko[j], bko[j + 1]
            while x < xe or y < ye:
                if y >= ye or (x < xe and av[x, 0] < bv[y, 0]):
                    x += 1
                elif x >= xe or bv[y, 0] < av[x, 0]:
                    y += 1
                else:
                    x += 1
                    y += 1
                nv += 1
            i += 1
            j += 1
        nk += 1
    return nk, nv


@_jit
def _pack(body, ck, cv, cn, nk, nv, n, d):
    """Close the output tables (laid out for capacities ``(ck, cv, cn)``) with their last rows, move
    them to the exact layout and write the radix index."""
    src = regions(ck, cv, cn, d)
    dst = regions(nk, nv, n, d)
    body[src[0] + nk] = nv
    body[src[1] + 2 * nv], body[src[1] + 2 * nv + 1] = 0, n
    lengths = (nk + 1, 2 * (nv + 1), n * (d + 1))
    for region in range(3):
        s, t = src[region], dst[region]
        if s != t:
            for x in range(lengths[region]):
                body[t + x] = body[s + x]
    write_radix(body, nk, dst[3])


@kernel
def work(merges, frontier, fuel):
    """Step every running merge whose buffer address is in ``merges`` with ``fuel`` each.

    ``frontier`` is the compaction frontier as an ``(m, d)`` int64 array (``m == 0``: no advance).
    A merge whose inputs are exhausted is packed and gets status ``DONE``; one whose sum leaves int64
    gets ``OVERFLOW``. Returns how many merges changed status in this call.
    """
    changed = 0
    for address in merges:
        h = column(address, HEADER)
        if h[STATUS] != RUNNING:
            continue
        d = h[DEPTH]
        a_nk, a_nv, a_n = h[OLDER + 1], h[OLDER + 2], h[OLDER + 3]
        b_nk, b_nv, b_n = h[NEWER + 1], h[NEWER + 2], h[NEWER + 3]
        a = tables(column(h[OLDER], regions(a_nk, a_nv, a_n, d)[4]), a_nk, a_nv, a_n, d)
        b = tables(column(h[NEWER], regions(b_nk, b_nv, b_n, d)[4]), b_nk, b_nv, b_n, d)
        ck, cv, cn = a_nk + b_nk, a_nv + b_nv, a_n + b_n
        body = column(address + 8 * HEADER, regions(ck, cv, cn, d)[4])
        if _step(h, a, b, tables(body, ck, cv, cn, d), frontier, fuel, d) < 0:
            h[STATUS] = OVERFLOW
            changed += 1
        elif h[POS_OLDER] >= a_nk and h[POS_NEWER] >= b_nk:
            _pack(body, ck, cv, cn, h[OUT_KEYS], h[OUT_VALS], h[OUT_UPDATES], d)
            h[STATUS] = DONE
            changed += 1
    return changed


@kernel
def cascade(table, lo, hi, frontier, fuel, out, ratio):
    """Merge the newest of the tries ``table[lo:hi]`` into one, as a spine's geometric invariant asks.

    ``table`` rows are ``(address, nk, nv, n)`` of tries of time depth ``frontier.shape[1]``, oldest
    first, adjacent in time, none an input of a merge in progress. Starting from the newest, the next
    older trie is merged in (times advanced by ``frontier``, consolidated) while it holds at most
    ``ratio`` times the updates merged so far (any size when ``ratio`` is 0) and the updates read in
    all stay within ``fuel``. ``out`` (int64, at
    least ``size`` of the summed sizes of ``table[lo:hi]`` long) receives the result, so that no array
    is returned (returning one costs microseconds). Returns ``(count, address, nk, nv, n, end, read)``:
    the ``count`` newest tries (``count >= 2``) became the trie in ``out[:end]`` (``address`` its data
    address) after reading ``read`` updates; ``count < 2`` when nothing was merged; ``-1`` when a sum
    left int64 (``nk``, ``nv`` then the key and val; nothing replaced).
    """
    d = frontier.shape[1]
    head = np.empty(HEADER, np.int64)  # the header of the merge under way
    kept = np.empty(0, np.int64)  # the trie of the last merge, alive while it is an input
    address, nk, nv, n = table[hi - 1, 0], table[hi - 1, 1], table[hi - 1, 2], table[hi - 1, 3]
    count, read = 1, 0
    direct = False  # the last merge wrote into ``out`` itself
    for i in range(hi - 2, lo - 1, -1):
        o_address, o_nk, o_nv, o_n = table[i, 0], table[i, 1], table[i, 2], table[i, 3]
        if (ratio > 0 and o_n > ratio * n) or read + o_n + n > fuel:
            break
        cn = o_n + n
        _start(head, o_address, o_nk, o_nv, o_n, address, nk, nv, n, d)
        a = tables(column(o_address, regions(o_nk, o_nv, o_n, d)[4]), o_nk, o_nv, o_n, d)
        # the newer input: the table's trie at first, then the last merge's result read through a view
        # of its buffer (the view holds the buffer: compiled code frees an array after its variable's
        # last use, so an address alone would not keep it alive)
        size = regions(nk, nv, n, d)[4]
        newer = column(address, size) if count == 1 else kept[:size]
        b = tables(newer, nk, nv, n, d)
        # the output laid out for the keys and vals of both (its regions move only where updates
        # cancel a whole val); the oldest merge this call can make writes into ``out`` (room for the
        # sum of all), saving a copy, the others into a trie of their own
        uk, uv = _union_sizes(a, b)
        direct = i == lo
        body = out if direct else np.empty(regions(uk, uv, cn, d)[4], np.int64)
        done = _step(head, a, b, tables(body, uk, uv, cn, d), frontier, cn + 1, d)
        if done < 0:
            return -1, np.int64(0), head[BAD_KEY], head[BAD_VAL], 0, 0, read
        nk, nv, n = head[OUT_KEYS], head[OUT_VALS], head[OUT_UPDATES]
        _pack(body, uk, uv, cn, nk, nv, n, d)
        read += done
        kept = body
        count += 1
    if count < 2:
        return count, np.int64(0), 0, 0, 0, 0, 0
    end = regions(nk, nv, n, d)[4]
    if not direct:
        for x in range(end):  # a loop: a slice assignment would compile numba's shape-error formatting
            out[x] = kept[x]
    return count, np.int64(out.ctypes.data), nk, nv, n, end, read


def advance_reference(time: tuple[int, ...], frontier: np.ndarray) -> tuple[int, ...]:
    """``meet over f in frontier of join(time, f)``, one time at a time."""
    if len(frontier) == 0:
        return time
    joins = [tuple(max(s, f) for s, f in zip(time, row, strict=True)) for row in frontier.tolist()]
    return tuple(min(column) for column in zip(*joins, strict=True))


def merge_reference(older, newer, frontier: np.ndarray):
    """The updates of a complete merge, by dictionary: ``older`` and ``newer`` are flat columns
    ``(keys, vals, times, diffs)``; returns the same columns, sorted by (key, val, time), advanced,
    summed and without zeros. Raises ``OverflowError`` when a sum leaves int64."""
    sums: dict[tuple[int, int, tuple[int, ...]], int] = {}
    for keys, vals, times, diffs in (older, newer):
        for k, v, t, x in zip(keys.tolist(), vals.tolist(), times.tolist(), diffs.tolist(), strict=True):
            at = (k, v, advance_reference(tuple(t), frontier))
            sums[at] = sums.get(at, 0) + x
    rows = sorted((k, v, t, x) for (k, v, t), x in sums.items() if x != 0)
    if any(not -(2**63) <= x < 2**63 for *_, x in rows):
        raise OverflowError("a sum of diffs leaves int64")
    d = frontier.shape[1]
    return (
        np.asarray([r[0] for r in rows], dtype=np.int64),
        np.asarray([r[1] for r in rows], dtype=np.int64),
        np.asarray([r[2] for r in rows], dtype=np.int64).reshape(len(rows), d),
        np.asarray([r[3] for r in rows], dtype=np.int64),
    )
