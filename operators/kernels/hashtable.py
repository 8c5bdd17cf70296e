"""Hash tables over int64 keys: open addressing with linear probing, for many keys per call.

A table maps distinct int64 keys to non-negative int values below ``2**31`` (dense indexes, record
ids). It is two arrays the caller owns:

* ``slots`` (int32, any length >= 2): ``-1`` for an empty bucket, else the value stored there;
* ``keys`` (int64): ``keys[v]`` is the key of value ``v`` (the table does not store keys itself, so
  one ``keys`` array can serve several tables whose values never collide: the interner's ints and
  pairs tables share the array of its ids' payloads).

Key ``k`` lives in the first bucket at or after ``home(k, len(slots))`` (wrapping around) that holds
it; every bucket between its home and its place is full. ``home`` is a multiplicative hash mapped to
the capacity by a multiply-shift, so capacities need not be powers of two. At most 70% of the buckets
are full; :func:`insert` grows ``slots`` when a new key would exceed that: by half, or at once to what
the rest of the call needs if it keeps bringing new keys at the rate seen so far.

New keys get values from a free list first (``free[nfree - 1]``, then ``free[nfree - 2]``, ...), then
``next_value, next_value + 1, ...``: a table of dense indexes passes an empty free list; the interner
passes the ids it has reclaimed. Values are handed out in the order the new keys first appear in the
query, so a call is deterministic.

:func:`insert` takes its queries in blocks of ``BLOCK`` keys: the home buckets of a block's keys, and the keys
stored there, are read first, all together, so that their cache misses overlap; a key found in its
home bucket is answered from that read, the others are probed one at a time as before. A bulk call
then waits for memory about once per block rather than once or twice per key.

Each compiled kernel has a plain reference beside it (``ref_*``) over a ``dict``: the property tests
in ``tests/kernels`` hold them to each other.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel

_inline = numba.njit(inline="always", cache=True, nogil=True)  # helpers of the kernels, inlined into them

EMPTY = -1
LOAD_NUM, LOAD_DEN = 7, 10  # at most 70% of the buckets full
MIN_CAPACITY = 16
BLOCK = 16  # keys whose home buckets are read together

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(32)


@_inline
def home(key: int, capacity: int) -> int:
    """The bucket a key's probe starts at: the top 32 bits of ``key * golden`` (mod 2**64) scaled to
    ``capacity`` (below 2**32)."""
    h = (np.uint64(key) * _GOLDEN) >> _SHIFT
    return np.int64((h * np.uint64(capacity)) >> _SHIFT)


@_inline
def _read_ahead(slots: np.ndarray, keys: np.ndarray, query: np.ndarray, lo: int, hi: int, held: np.ndarray) -> None:
    """``held[j - lo]``: the value in the home bucket of ``query[j]`` when it is that key's, else
    ``-1``, for ``lo <= j < hi`` (two passes of independent loads: the buckets, then their keys)."""
    cap = slots.shape[0]
    for j in range(lo, hi):
        held[j - lo] = slots[home(query[j], cap)]
    for j in range(lo, hi):
        s = held[j - lo]
        if s >= 0 and keys[s] != query[j]:
            held[j - lo] = -1


def capacity_for(count: int) -> int:
    """The least capacity holding ``count`` keys within the load factor (at least ``MIN_CAPACITY``)."""
    return max(MIN_CAPACITY, -(-count * LOAD_DEN // LOAD_NUM) + 1)


@kernel
def find(slots: np.ndarray, keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The value of each key of ``query``, ``-1`` for keys not in the table."""
    cap = slots.shape[0]
    out = np.empty(query.shape[0], dtype=np.int64)
    for i in range(query.shape[0]):
        k = query[i]
        pos = home(k, cap)
        while True:
            s = slots[pos]
            if s < 0:
                out[i] = -1
                break
            if keys[s] == k:
                out[i] = s
                break
            pos += 1
            if pos == cap:
                pos = 0
    return out


@_inline
def _place(slots: np.ndarray, keys: np.ndarray, value: int) -> None:
    cap = slots.shape[0]
    pos = home(keys[value], cap)
    while slots[pos] >= 0:
        pos += 1
        if pos == cap:
            pos = 0
    slots[pos] = value


@_inline
def _grown(slots: np.ndarray, keys: np.ndarray, capacity: int) -> np.ndarray:
    out = np.full(capacity, -1, dtype=np.int32)
    for j in range(slots.shape[0]):
        if slots[j] >= 0:
            _place(out, keys, slots[j])
    return out


@kernel
def insert(slots: np.ndarray, keys: np.ndarray, query: np.ndarray, count: int, free: np.ndarray, nfree: int,
           next_value: int, limit: int):
    """The value of each key of ``query``, adding the keys not in the table.

    ``count`` is the number of keys in the table. A new key takes ``free[nfree - 1]`` (and ``nfree``
    drops) or, with the free list empty, ``next_value`` (which rises); ``keys[value]`` is set to it.
    Returns ``(values, slots, count, nfree, next_value, done)``: ``slots`` is a new, larger array when
    the table grew (the caller keeps it); ``done < len(query)`` when the call stopped before key
    ``done`` because its value would have reached ``limit`` or ``len(keys)`` (grow ``keys``, or raise,
    and call again with the rest). Values ``out[:done]`` are final; the rest are ``-1``."""
    out = np.full(query.shape[0], -1, dtype=np.int64)
    cap = slots.shape[0]
    room = min(limit, keys.shape[0])
    added = 0
    n = query.shape[0]
    held = np.empty(BLOCK, dtype=np.int64)
    for i in range(n):
        if i % BLOCK == 0:
            _read_ahead(slots, keys, query, i, min(i + BLOCK, n), held)
        if held[i % BLOCK] >= 0:  # found in its home bucket (values never leave a table during a call)
            out[i] = held[i % BLOCK]
            continue
        k = query[i]
        pos = home(k, cap)
        while True:
            s = slots[pos]
            if s < 0:
                break
            if keys[s] == k:
                break
            pos += 1
            if pos == cap:
                pos = 0
        if s >= 0:
            out[i] = s
            continue
        if nfree > 0:
            v = free[nfree - 1]
        elif next_value < room:
            v = next_value
        else:
            return out, slots, count, nfree, next_value, i
        if nfree > 0:
            nfree -= 1
        else:
            next_value += 1
        keys[v] = k
        added += 1
        if (count + 1) * LOAD_DEN > cap * LOAD_NUM:
            # grow by half, or at once to the size the rest of the query needs if it brings new keys
            # at the rate seen so far (one rehash for a large batch of new keys, not dozens)
            expected = count + 1 + (query.shape[0] - i - 1) * added // (i + 1)
            cap = max(cap + cap // 2 + 1, (expected * LOAD_DEN) // LOAD_NUM + 1)
            slots = _grown(slots, keys, cap)
            _place(slots, keys, v)
        else:
            slots[pos] = v
        count += 1
        out[i] = v
    return out, slots, count, nfree, next_value, query.shape[0]


@kernel
def build(keys: np.ndarray, classes: np.ndarray, wanted: np.ndarray, n: int, capacity: int, skip_lo: int,
          skip_hi: int) -> np.ndarray:
    """Slots of ``capacity`` buckets holding every value ``v < n`` with ``wanted[classes[v]]`` outside
    ``skip_lo <= v < skip_hi`` (their keys ``keys[v]`` must be distinct): a table rebuilt from the
    values still in use, with no temporary per value."""
    slots = np.full(capacity, -1, dtype=np.int32)
    for v in range(n):
        if wanted[classes[v]] and not skip_lo <= v < skip_hi:
            _place(slots, keys, v)
    return slots


# -- references ------------------------------------------------------------------------------------
def ref_find(table: dict[int, int], query: np.ndarray) -> np.ndarray:
    """:func:`find` over a dict ``key -> value``."""
    return np.array([table.get(k, -1) for k in query.tolist()], dtype=np.int64)


def ref_insert(table: dict[int, int], keys: np.ndarray, query: np.ndarray, free: np.ndarray, nfree: int,
               next_value: int, limit: int) -> tuple[np.ndarray, int, int, int]:
    """:func:`insert` over a dict ``key -> value`` (updated in place): ``(values, nfree, next_value,
    done)``."""
    out = np.full(len(query), -1, dtype=np.int64)
    room = min(limit, len(keys))
    for i, k in enumerate(query.tolist()):
        if k in table:
            out[i] = table[k]
            continue
        if nfree > 0:
            v = int(free[nfree - 1])
            nfree -= 1
        elif next_value < room:
            v, next_value = next_value, next_value + 1
        else:
            return out, nfree, next_value, i
        keys[v] = k
        table[k] = out[i] = v
    return out, nfree, next_value, len(query)


def ref_build(keys: np.ndarray, classes: np.ndarray, wanted: np.ndarray, n: int, skip_lo: int = 0,
              skip_hi: int = 0) -> dict[int, int]:
    """:func:`build` as the dict ``key -> value`` it must hold."""
    return {int(keys[v]): v for v in range(n) if wanted[classes[v]] and not skip_lo <= v < skip_hi}
