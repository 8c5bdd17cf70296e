"""Hash tables over int64 keys: open addressing with linear probing, for many keys per call.

A table maps distinct int64 keys to non-negative int values below ``2**31`` (dense indexes, record
ids). It is three arrays the caller owns:

* ``slots`` (int32, any length >= 2): ``-1`` for an empty bucket, else the value stored there;
* ``tags`` (int8, as long as ``slots``): for a full bucket, eight bits of its key's hash
  (:func:`tag`), so that a probe reads a key only where the tag matches its own (a probe past a
  bucket of another key reads that key one time in 256, not every time);
* ``keys`` (int64): ``keys[v]`` is the key of value ``v`` (the table does not store keys itself, so
  one ``keys`` array can serve several tables whose values never collide: the interner's ints and
  pairs tables share the array of its ids' payloads).

Key ``k`` lives in the first bucket at or after ``home(k, len(slots))`` (wrapping around) that holds
it; every bucket between its home and its place is full. ``home`` is a multiplicative hash mapped to
the capacity by a multiply-shift, so capacities need not be powers of two. At most 70% of the buckets
are full; :func:`insert` grows ``slots`` and ``tags`` when a new key would exceed that: by half, or at
once to what the rest of the call needs if it keeps bringing new keys at the rate seen so far.

New keys get values from a free list first (``free[nfree - 1]``, then ``free[nfree - 2]``, ...), then
``next_value, next_value + 1, ...``: a table of dense indexes passes an empty free list; the interner
passes the ids it has reclaimed. Values are handed out in the order the new keys first appear in the
query, so a call is deterministic.

:func:`insert_tagged` takes its queries in blocks of ``TAGGED_BLOCK`` keys: the home buckets of a
block's keys, their tags, and the keys stored there when the tags match, are read first, all together,
so that their cache misses overlap; then each key is probed in turn, from memory at hand. A bulk call
then waits for memory about once per block rather than once or twice per key.

:func:`find_tagged`, :func:`insert_tagged` and :func:`build` work on tagged tables; :func:`find` and
:func:`insert` on tables of ``slots`` alone (no tags kept: every probe past a bucket reads its key),
for callers that keep no tags.

Each compiled kernel has a plain reference beside it (``ref_*``) over a ``dict``: the property tests
in ``tests/kernels`` hold them to each other.
"""

from __future__ import annotations

import numba
import numpy as np

from . import helper, kernel

_inline = numba.njit(inline="always", cache=True, nogil=True)  # helpers of the kernels, inlined into them

EMPTY = -1
LOAD_NUM, LOAD_DEN = 7, 10  # at most 70% of the buckets full
MIN_CAPACITY = 16
BLOCK = 16  # keys whose home buckets are read together (untagged tables)
TAGGED_BLOCK = 64  # the same, in tagged tables

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(32)
_BYTE = np.uint64(0xFF)


@_inline
def home(key: int, capacity: int) -> int:
    """The bucket a key's probe starts at: the top 32 bits of ``key * golden`` (mod 2**64) scaled to
    ``capacity`` (below 2**32)."""
    h = (np.uint64(key) * _GOLDEN) >> _SHIFT
    return np.int64((h * np.uint64(capacity)) >> _SHIFT)


@_inline
def tag(key: int) -> np.int8:
    """The tag of a key: the low eight of the 32 bits ``home`` scales (the bits that choose the bucket
    within a run of 256 are mostly others), as an int8."""
    return np.int8(np.int64(((np.uint64(key) * _GOLDEN) >> _SHIFT) & _BYTE) - 128)


@_inline
def _read_ahead(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray, lo: int, hi: int,
                homes: np.ndarray) -> int:
    """``homes[j - lo]``: the home bucket of ``query[j]``, for ``lo <= j < hi``, with the buckets, their
    tags and the keys of matching tags read on the way (two passes of independent loads, so that their
    cache misses overlap); returns a sum of what was read (so that the reads are made)."""
    cap = slots.shape[0]
    seen = 0
    for j in range(lo, hi):
        pos = home(query[j], cap)
        homes[j - lo] = pos
        seen += slots[pos] + tags[pos]
    for j in range(lo, hi):
        pos = homes[j - lo]
        s = slots[pos]
        if s >= 0 and tags[pos] == tag(query[j]):
            seen += keys[s]
    return seen


def capacity_for(count: int) -> int:
    """The least capacity holding ``count`` keys within the load factor (at least ``MIN_CAPACITY``)."""
    return max(MIN_CAPACITY, -(-count * LOAD_DEN // LOAD_NUM) + 1)


def empty(capacity: int = MIN_CAPACITY) -> tuple[np.ndarray, np.ndarray]:
    """``(slots, tags)`` of an empty table of ``capacity`` buckets."""
    return np.full(capacity, EMPTY, dtype=np.int32), np.zeros(capacity, dtype=np.int8)


@_inline
def _lookup(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, k: int) -> int:
    """The value of key ``k``, ``-1`` when it is not in the table."""
    cap = slots.shape[0]
    t = tag(k)
    pos = home(k, cap)
    while True:
        s = slots[pos]
        if s < 0:
            return -1
        if tags[pos] == t and keys[s] == k:
            return s
        pos += 1
        if pos == cap:
            pos = 0


@kernel
def find_tagged(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The value of each key of ``query``, ``-1`` for keys not in the table."""
    out = np.empty(query.shape[0], dtype=np.int64)
    for i in range(query.shape[0]):
        out[i] = _lookup(slots, tags, keys, query[i])
    return out


@_inline
def _place(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, value: int) -> None:
    cap = slots.shape[0]
    k = keys[value]
    pos = home(k, cap)
    while slots[pos] >= 0:
        pos += 1
        if pos == cap:
            pos = 0
    slots[pos] = value
    tags[pos] = tag(k)


@kernel
def insert_tagged(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray, count: int,
                  free: np.ndarray, nfree: int, next_value: int, limit: int):
    """The value of each key of ``query``, adding the keys not in the table.

    ``count`` is the number of keys in the table. A new key takes ``free[nfree - 1]`` (and ``nfree``
    drops) or, with the free list empty, ``next_value`` (which rises); ``keys[value]`` is set to it.
    Returns ``(values, slots, tags, count, nfree, next_value, done)``: ``slots`` and ``tags`` are new,
    larger arrays when the table grew (the caller keeps them); ``done < len(query)`` when the call
    stopped before key ``done`` because its value would have reached ``limit`` or ``len(keys)`` (grow
    ``keys``, or raise, and call again with the rest). Values ``out[:done]`` are final; the rest are
    ``-1``."""
    return _insert_tagged(slots, tags, keys, query, np.full(query.shape[0], -1, dtype=np.int64), count, free, nfree,
                          next_value, limit)


@kernel
def insert_tagged_into(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray, count: int,
                       free: np.ndarray, nfree: int, next_value: int, limit: int):
    """:func:`insert_tagged` writing the values over the keys of ``query`` (the values returned are
    ``query`` itself): a caller that gives its column of keys up saves a column. Past ``done``,
    ``query`` still holds its keys."""
    return _insert_tagged(slots, tags, keys, query, query, count, free, nfree, next_value, limit)


@helper
def _insert_tagged(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray, out: np.ndarray,
                   count: int, free: np.ndarray, nfree: int, next_value: int, limit: int):
    """The body of :func:`insert_tagged`, writing the value of ``query[i]`` into ``out[i]`` (``out`` may
    be ``query``: each key is read before its value is written, and the keys ahead are not written).

    The keys are probed by :func:`_insert_run` until the table must grow; the table grows here and
    the run goes on from the next key (a loop that may replace the arrays it probes would pay for
    that on every key)."""
    room = min(limit, keys.shape[0])
    n = query.shape[0]
    homes = np.empty(TAGGED_BLOCK, dtype=np.int64)
    seen = 0
    added = 0
    i = 0
    while True:
        i, v, count, nfree, next_value, added, seen = _insert_run(
            slots, tags, keys, query, out, i, count, free, nfree, next_value, room, added, homes, seen)
        if v < 0:  # done, or out of values before key i
            break
        cap = _grown_capacity(slots.shape[0], count, n, i, added)  # key i took value v, the table is full
        grown = np.full(cap, -1, dtype=np.int32)
        grown_tags = np.zeros(cap, dtype=np.int8)
        for j in range(slots.shape[0]):
            if slots[j] >= 0:
                _place(grown, grown_tags, keys, slots[j])
        slots, tags = grown, grown_tags
        _place(slots, tags, keys, v)
        start = i - i % TAGGED_BLOCK
        for j in range(i + 1, min(start + TAGGED_BLOCK, n)):  # the block's homes in the new capacity
            homes[j - start] = home(query[j], cap)
        count += 1
        out[i] = v
        i += 1
    if seen == 1 << 62 and n > 0:  # looks the first key up again (its value as found): the reads ahead are used
        out[0] = _lookup(slots, tags, keys, keys[out[0]])
    return out, slots, tags, count, nfree, next_value, i


@helper
def _grown_capacity(cap: int, count: int, n: int, i: int, added: int) -> int:
    """The capacity a full table of ``cap`` buckets and ``count`` keys grows to while key ``i`` of a
    query of ``n`` keys goes in, ``added`` of them new so far: by half, or at once to the size the
    rest of the query needs if it brings new keys at the rate seen so far (one rehash for a large
    batch of new keys, not dozens)."""
    expected = count + 1 + (n - i - 1) * added // (i + 1)
    return max(cap + cap // 2 + 1, (expected * LOAD_DEN) // LOAD_NUM + 1)


@helper
def _insert_run(slots: np.ndarray, tags: np.ndarray, keys: np.ndarray, query: np.ndarray, out: np.ndarray,
                lo: int, count: int, free: np.ndarray, nfree: int, next_value: int, room: int, added: int,
                homes: np.ndarray, seen: int):
    """Keys ``query[lo:]`` into the table as it is, up to the first new key that would fill it past
    the load factor: ``(i, v, count, nfree, next_value, added, seen)``. ``v >= 0``: key ``i`` took
    value ``v`` (``keys[v]`` set, counted in ``added`` but not in ``count``) and is not placed: the
    caller grows the table. Else ``i`` is the number of keys done (``len(query)``, or the key whose
    value would have reached ``room``)."""
    cap = slots.shape[0]
    n = query.shape[0]
    for i in range(lo, n):
        if i % TAGGED_BLOCK == 0:
            seen += _read_ahead(slots, tags, keys, query, i, min(i + TAGGED_BLOCK, n), homes)
        k = query[i]
        t = tag(k)
        pos = homes[i % TAGGED_BLOCK]
        while True:
            s = slots[pos]
            if s < 0:
                break
            if tags[pos] == t and keys[s] == k:
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
            return i, -1, count, nfree, next_value, added, seen
        if nfree > 0:
            nfree -= 1
        else:
            next_value += 1
        keys[v] = k
        added += 1
        if (count + 1) * LOAD_DEN > cap * LOAD_NUM:
            return i, v, count, nfree, next_value, added, seen
        slots[pos] = v
        tags[pos] = t
        count += 1
        out[i] = v
    return n, -1, count, nfree, next_value, added, seen


@kernel
def build(keys: np.ndarray, classes: np.ndarray, wanted: np.ndarray, n: int, capacity: int, skip_lo: int,
          skip_hi: int):
    """``(slots, tags)`` of ``capacity`` buckets holding every value ``v < n`` with
    ``wanted[classes[v]]`` outside ``skip_lo <= v < skip_hi`` (their keys ``keys[v]`` must be
    distinct): a table rebuilt from the values still in use, with no temporary per value."""
    slots = np.full(capacity, -1, dtype=np.int32)
    tags = np.zeros(capacity, dtype=np.int8)
    for v in range(n):
        if wanted[classes[v]] and not skip_lo <= v < skip_hi:
            _place(slots, tags, keys, v)
    return slots, tags



# -- untagged tables: slots only ------------------------------------------------------------------------
@_inline
def _read_ahead_untagged(slots: np.ndarray, keys: np.ndarray, query: np.ndarray, lo: int, hi: int,
                         held: np.ndarray) -> None:
    """``held[j - lo]``: the value in the home bucket of ``query[j]`` when it is that key's, else
    ``-1``, for ``lo <= j < hi`` (two passes of independent loads: the buckets, then their keys)."""
    cap = slots.shape[0]
    for j in range(lo, hi):
        held[j - lo] = slots[home(query[j], cap)]
    for j in range(lo, hi):
        s = held[j - lo]
        if s >= 0 and keys[s] != query[j]:
            held[j - lo] = -1


@kernel
def find(slots: np.ndarray, keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The value of each key of ``query``, ``-1`` for keys not in the table (of an untagged table)."""
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
def _place_untagged(slots: np.ndarray, keys: np.ndarray, value: int) -> None:
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
            _place_untagged(out, keys, slots[j])
    return out


@kernel
def insert(slots: np.ndarray, keys: np.ndarray, query: np.ndarray, count: int, free: np.ndarray, nfree: int,
           next_value: int, limit: int):
    """The value of each key of ``query``, adding the keys not in the table (of an untagged table).

    ``count`` is the number of keys in the table. A new key takes ``free[nfree - 1]`` (and ``nfree``
    drops) or, with the free list empty, ``next_value`` (which rises); ``keys[value]`` is set to it.
    Returns ``(values, slots, count, nfree, next_value, done)``: ``slots`` is a new, larger array when
    the table grew (the caller keeps it); ``done < len(query)`` when the call stopped before key
    ``done`` because its value would have reached ``limit`` or ``len(keys)`` (grow ``keys``, or raise,
    and call again with the rest). Values ``out[:done]`` are final; the rest are ``-1``."""
    out = np.full(query.shape[0], -1, dtype=np.int64)
    room = min(limit, keys.shape[0])
    n = query.shape[0]
    held = np.empty(BLOCK, dtype=np.int64)
    added = 0
    i = 0
    while True:  # runs of keys into the table as it is; between them it grows (as in _insert_tagged)
        i, v, count, nfree, next_value, added = _insert_untagged_run(
            slots, keys, query, out, i, count, free, nfree, next_value, room, added, held)
        if v < 0:
            break
        slots = _grown(slots, keys, _grown_capacity(slots.shape[0], count, n, i, added))
        _place_untagged(slots, keys, v)
        count += 1
        out[i] = v
        i += 1
    return out, slots, count, nfree, next_value, i


@helper
def _insert_untagged_run(slots: np.ndarray, keys: np.ndarray, query: np.ndarray, out: np.ndarray, lo: int,
                         count: int, free: np.ndarray, nfree: int, next_value: int, room: int, added: int,
                         held: np.ndarray):
    """:func:`_insert_run` for an untagged table (``held``: the values read ahead, which stay valid
    when the table grows): ``(i, v, count, nfree, next_value, added)``."""
    cap = slots.shape[0]
    n = query.shape[0]
    for i in range(lo, n):
        if i % BLOCK == 0:
            _read_ahead_untagged(slots, keys, query, i, min(i + BLOCK, n), held)
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
            return i, -1, count, nfree, next_value, added
        if nfree > 0:
            nfree -= 1
        else:
            next_value += 1
        keys[v] = k
        added += 1
        if (count + 1) * LOAD_DEN > cap * LOAD_NUM:
            return i, v, count, nfree, next_value, added
        slots[pos] = v
        count += 1
        out[i] = v
    return n, -1, count, nfree, next_value, added


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


def ref_tags(keys: np.ndarray) -> np.ndarray:
    """:func:`tag` of each key, by numpy's wrapping uint64 arithmetic."""
    with np.errstate(over="ignore"):
        h = (keys.astype(np.uint64) * _GOLDEN) >> _SHIFT
    return ((h & _BYTE).astype(np.int64) - 128).astype(np.int8)


def ref_build(keys: np.ndarray, classes: np.ndarray, wanted: np.ndarray, n: int, skip_lo: int = 0,
              skip_hi: int = 0) -> dict[int, int]:
    """:func:`build` as the dict ``key -> value`` it must hold."""
    return {int(keys[v]): v for v in range(n) if wanted[classes[v]] and not skip_lo <= v < skip_hi}
