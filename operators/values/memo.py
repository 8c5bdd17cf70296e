"""Vectorized hash tables and memos: int64 codes mapped to dense indexes and to remembered results.

A ``KeyTable`` numbers distinct int64 keys ``0, 1, 2, …`` in an open-addressing hash set (linear probing,
one int32 slot per bucket, at most 70% full) whose lookups and inserts run for a whole array of keys at
once: every probe round is a few numpy operations over the keys still probing. Duplicate new keys in
one call get one index: they probe in lockstep, race for the same empty bucket, and the losers find
the winner's key there in the next round. The interner keeps its ints and pairs in such tables.

User functions of ``map``/``filter`` and the record builders of joins are deterministic functions of
their inputs (as differential dataflow requires), and the same records recur at many times and in many
iterations. A ``Memo`` maps int64 codes (a record id, or two ids packed into one int64) to results, so
a batch costs Python work only for codes never seen before. Codes that are dense ids are remembered in
a direct array over their range; sparse or packed codes in a ``KeyTable``. A memo is a cache: its table
starts afresh once it holds ``limit`` codes, so a long run over ever new records (a join's outputs
on a sliding window) keeps it bounded, at the price of computing the records still in use once more.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..config import DEFAULT

SHIFT = 32
MAX_ID = (1 << 31) - 1

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_GOLDEN_INVERSE = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_EMPTY = -1
_SMALL = 16  # keys added one at a time in plain Python (small calls, the last few of long probe runs)
_CACHED = 2048  # lookups of at most this many keys go through the dict of recent keys first
_CACHE_LIMIT = 1 << 16
_BLOCK = 1 << 20  # keys per pass of the large operations (bounds their temporaries)
_STEPS = np.arange(8, dtype=np.int64)  # buckets read at once by lookups displaced from their home
_STEPS_WIDE = np.arange(48, dtype=np.int64)  # ... when only a few are


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 code per pair of ids (each below 2**31)."""
    return (a.astype(np.int64) << SHIFT) | b.astype(np.int64)


class KeyTable:
    """Dense indexes ``0..n-1`` for distinct int64 keys (each call numbers its new keys after the
    existing ones, in an order of its own); ``keys[i]`` is key ``i``."""

    def __init__(self) -> None:
        self._keys = np.empty(16, dtype=np.int64)
        self.n = 0
        self._slots = np.full(32, _EMPTY, dtype=np.int32)
        self._bits = 5
        self._range = (0, -1)  # least and greatest key stored
        self._cache: dict[int, int] = {}  # key -> index, for keys recently looked up in small calls

    def __len__(self) -> int:
        return self.n

    @property
    def keys(self) -> np.ndarray:
        return self._keys[: self.n]

    def nbytes(self) -> int:
        return self._keys.nbytes + self._slots.nbytes

    def _home(self, keys: np.ndarray) -> np.ndarray:
        h = keys.view(np.uint64) * _GOLDEN  # wraps modulo 2**64 (arrays do not warn)
        return (h >> np.uint64(64 - self._bits)).view(np.int64)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The index of each key, ``-1`` for keys not in the table."""
        if len(keys) <= _CACHED:
            return self._find_cached(keys)
        if self.n == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        if len(keys) <= _BLOCK:
            return self._find_block(keys)
        out = np.empty(len(keys), dtype=np.int64)
        for lo in range(0, len(keys), _BLOCK):  # blocks bound the temporaries
            out[lo : lo + _BLOCK] = self._find_block(keys[lo : lo + _BLOCK])
        return out

    def _find_cached(self, keys: np.ndarray) -> np.ndarray:
        """A few keys: first in a dict of keys recently looked up (a dozen numpy calls cost more than a
        few hundred dict lookups), then in the table."""
        listed = keys.tolist()
        got = list(map(self._cache.get, listed))
        if None not in got:
            return np.array(got, dtype=np.int64)
        at = [i for i, r in enumerate(got) if r is None]
        rows = self._find_block(keys[at]).tolist() if self.n else [-1] * len(at)
        if len(self._cache) > _CACHE_LIMIT:
            self._cache.clear()
        for i, r in zip(at, rows):
            got[i] = r
            if r >= 0:
                self._cache[listed[i]] = r
        return np.array(got, dtype=np.int64)

    def _find_block(self, keys: np.ndarray) -> np.ndarray:
        if len(keys) > 1024:  # keys outside the stored range (new ids, times, hashes) are not there
            inside = (keys >= self._range[0]) & (keys <= self._range[1])
            if not inside.all():
                out = np.full(len(keys), -1, dtype=np.int64)
                at = np.flatnonzero(inside)
                if len(at):
                    out[at] = self._find(keys[at])
                return out
        return self._find(keys)

    def _find(self, keys: np.ndarray) -> np.ndarray:
        slots, stored, mask = self._slots, self._keys, (1 << self._bits) - 1
        pos = self._home(keys)
        if len(keys) <= 64:  # a few keys: their runs read in one go, whatever their length
            return self._find_runs(np.arange(len(keys)), pos, keys, np.full(len(keys), -1, dtype=np.int64))
        # the first probe of every key in full-array passes (an empty slot reads some stored key: masked)
        s = slots.take(pos)
        full = s != _EMPTY
        hit = stored.take(s) == keys
        hit &= full
        out = np.where(hit, s, -1).astype(np.int64)
        todo = np.flatnonzero(full & ~hit)
        pos, probe = (pos[todo] + 1) & mask, keys[todo]
        while len(todo) > _BLOCK // 256:
            s = slots[pos]
            full = s != _EMPTY
            hit = full.copy()
            hit[full] = stored[s[full]] == probe[full]
            out[todo[hit]] = s[hit]
            go = full & ~hit
            todo, pos, probe = todo[go], (pos[go] + 1) & mask, probe[go]
        return self._find_runs(todo, pos, probe, out)

    def _find_runs(self, todo: np.ndarray, pos: np.ndarray, probe: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Lookups of a few keys: each reads the next buckets of its run at once (enough for nearly all)."""
        slots, stored, mask = self._slots, self._keys, (1 << self._bits) - 1
        steps = _STEPS if len(todo) > 64 else _STEPS_WIDE
        while len(todo):
            s = slots[(pos[:, None] + steps) & mask]
            empty = s == _EMPTY
            match = stored[s] == probe[:, None]
            match &= ~empty
            stop = match | empty
            first = stop.argmax(axis=1)
            row = np.arange(len(todo))
            found = match[row, first]
            out[todo[found]] = s[row[found], first[found]]
            go = ~stop.any(axis=1)
            todo, pos, probe = todo[go], (pos[go] + len(steps)) & mask, probe[go]
        return out

    def index(self, keys: np.ndarray) -> np.ndarray:
        """The index of each key, numbering the keys not seen before ``n, n + 1, …``."""
        out = self.find(keys)
        missing = np.flatnonzero(out < 0)
        if len(missing):
            out[missing] = self.add_missing(keys[missing])
        return out

    def add_missing(self, keys: np.ndarray) -> np.ndarray:
        """Indexes for keys known not to be in the table (possibly repeated), numbered from ``n``."""
        if len(keys) <= _SMALL:
            return np.array([self._index1(k) for k in keys.tolist()], dtype=np.int64)
        if len(keys) >= max(1 << 16, self.n // 12):  # a rebuild costs less than claims
            return self._add_bulk(keys)
        self._reserve(self.n + len(keys))
        self._widen(int(keys.min()), int(keys.max()))
        out = np.empty(len(keys), dtype=np.int64)
        slots, mask = self._slots, (1 << self._bits) - 1
        todo = np.arange(len(keys))
        pos = self._home(keys)
        probe = keys
        while len(todo) > _SMALL:
            s = slots[pos]
            free = s == _EMPTY
            if free.any():
                # every key at a free bucket writes a claim there; the last write of a bucket wins it
                fp, ft = pos[free], todo[free]
                slots[fp] = -2 - ft
                won = slots[fp] == -2 - ft
                wp, wt = fp[won], ft[won]
                new = np.arange(self.n, self.n + len(wt), dtype=np.int64)
                slots[wp] = new
                self._keys[new] = keys[wt]
                self.n += len(wt)
                s = slots[pos]  # the losers now see their bucket's winner
            hit = self._keys[s] == probe
            out[todo[hit]] = s[hit]
            go = ~hit
            todo, pos, probe = todo[go], (pos[go] + 1) & mask, probe[go]
        for t, k in zip(todo.tolist(), probe.tolist()):  # the few in long runs, one at a time
            out[t] = self._index1(k)
        return out

    def append(self, keys: np.ndarray) -> None:
        """Number distinct keys not in the table ``n, n + 1, …`` in their order (``index`` numbers new
        keys in an order of its own)."""
        if len(keys):
            self._add_bulk(keys)

    def _add_bulk(self, keys: np.ndarray) -> np.ndarray:
        """Many new keys: deduplicated by one sort of their hashes (a bijection of the keys, so equal
        hashes are equal keys), appended, and the whole table rebuilt in one placement pass."""
        with np.errstate(over="ignore"):
            h = keys.view(np.uint64) * _GOLDEN
        h.sort()
        distinct = bool((h[1:] != h[:-1]).all())
        start = self.n
        if distinct:  # numbered in their order
            m = len(keys)
            self._grow_keys(start + m)
            self._keys[start : start + m] = keys
        else:
            first = np.ones(len(h), dtype=bool)
            first[1:] = h[1:] != h[:-1]
            h = h[first]
            m = len(h)
            self._grow_keys(start + m)
            with np.errstate(over="ignore"):
                self._keys[start : start + m] = (h * _GOLDEN_INVERSE).view(np.int64)
        del h
        self._widen(int(keys.min()), int(keys.max()))
        self.n += m
        self._rehash(self._bits_for(self.n))
        return np.arange(start, start + m, dtype=np.int64) if distinct else self.find(keys)

    def _widen(self, lo: int, hi: int) -> None:
        if self.n == 0:
            self._range = (lo, hi)
        else:
            self._range = (min(lo, self._range[0]), max(hi, self._range[1]))

    @staticmethod
    def _bits_for(n: int) -> int:
        bits = 5
        while n * 10 > 7 << bits:
            bits += 1
        return bits

    def _grow_keys(self, n: int) -> None:
        if n > len(self._keys):
            grown = np.empty(max(n, 2 * len(self._keys)), dtype=np.int64)
            grown[: self.n] = self._keys[: self.n]
            self._keys = grown

    def _reserve(self, n: int) -> None:
        self._grow_keys(n)
        if n * 10 > 7 << self._bits:
            self._rehash(self._bits_for(n))

    def _rehash(self, bits: int) -> None:
        """Slots for every key, as if inserted in the order of their home buckets: then a key goes to
        ``max(home, previous key's bucket + 1)``, a running maximum (keys running off the end wrap
        around into the first empty buckets, as linear probing does)."""
        self._bits = bits
        cap = 1 << bits
        self._slots = slots = np.full(cap, _EMPTY, dtype=np.int32)
        n = self.n
        if n == 0:
            return
        order = np.empty(n, dtype=np.int64)  # (home << 32 | row), sorted
        for lo in range(0, n, _BLOCK):
            hi = min(lo + _BLOCK, n)
            order[lo:hi] = (self._home(self._keys[lo:hi]) << 32) | np.arange(lo, hi, dtype=np.int64)
        order.sort()
        overflow, reach = [], -1  # reach: the bucket of the previous key
        for lo in range(0, n, _BLOCK):
            part = order[lo : lo + _BLOCK]
            step = np.arange(lo, lo + len(part), dtype=np.int64)
            place = np.maximum.accumulate(np.maximum((part >> 32) - step, reach - lo + 1)) + step
            reach = int(place[-1])
            rows = (part & 0xFFFFFFFF).astype(np.int32)
            inside = int(np.searchsorted(place, cap))
            slots[place[:inside]] = rows[:inside]
            overflow.append(rows[inside:])
        if reach >= cap:
            rows = np.concatenate(overflow)
            slots[np.flatnonzero(slots == _EMPTY)[: len(rows)]] = rows

    # -- one key at a time (small calls: a few Python operations instead of dozens of numpy calls) ----
    def _home1(self, key: int) -> int:
        return ((key * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> (64 - self._bits)

    def _find1(self, key: int, pos: int | None = None) -> int:
        slots, stored, mask = self._slots, self._keys, (1 << self._bits) - 1
        if pos is None:
            pos = self._home1(key)
        while True:
            s = int(slots[pos])
            if s == _EMPTY:
                return -1
            if stored[s] == key:
                return s
            pos = (pos + 1) & mask

    def _index1(self, key: int) -> int:
        i = self._find1(key)
        if i >= 0:
            return i
        self._reserve(self.n + 1)
        slots, mask = self._slots, (1 << self._bits) - 1
        pos = self._home1(key)
        while slots[pos] != _EMPTY:
            pos = (pos + 1) & mask
        i = self.n
        slots[pos] = i
        self._keys[i] = key
        self._widen(key, key)
        self.n += 1
        return i


class Memo:
    """``codes -> results`` for a function computed on the codes it has not seen yet.

    ``compute(codes)`` gets distinct new codes and returns one result per code; results must fit
    ``dtype`` and not be its least value (the mark of an unknown code). The memo starts afresh once its
    table holds ``limit`` codes."""

    def __init__(self, compute: Callable[[np.ndarray], np.ndarray], dtype: type = np.int64, *,
                 limit: int = DEFAULT.memo_limit) -> None:
        self.compute = compute
        self.dtype = np.dtype(dtype)
        self._missing = np.iinfo(self.dtype).min
        self.limit = limit
        self.restarts = 0  # times the memo started afresh
        self._empty()

    def clear(self) -> None:
        """Forget every code (a memo is a cache: what is asked again is computed again)."""
        self._empty()
        self.restarts += 1

    def _empty(self) -> None:
        self._count = 0
        self._lo = 0
        self._dense: np.ndarray | None = np.empty(0, dtype=self.dtype)  # results of codes lo, lo + 1, …
        self._table: KeyTable | None = None  # once codes are sparse: their table, and results by index
        self._results = np.empty(0, dtype=self.dtype)

    def full(self) -> bool:
        """Whether the memo's table holds its limit of codes (the next call starts afresh)."""
        return self._table is not None and self._table.n >= self.limit

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        if self._dense is not None:
            return self._dense.nbytes
        return self._table.nbytes() + self._results.nbytes

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        if len(codes) == 0:
            return np.empty(0, dtype=np.int64)
        if self._dense is not None and self._fits_dense(codes):
            return self._call_dense(codes)
        if self._dense is not None:
            self._to_table()
        return self._call_table(codes)

    def _fits_dense(self, codes: np.ndarray) -> bool:
        lo, hi = int(codes.min()), int(codes.max())
        if lo < 0 or hi > MAX_ID:
            return False
        if len(self._dense):
            lo, hi = min(lo, self._lo), max(hi, self._lo + len(self._dense) - 1)
        return hi - lo + 1 <= 4 * (self._count + len(codes)) + 4096

    def _call_dense(self, codes: np.ndarray) -> np.ndarray:
        self._cover(int(codes.min()), int(codes.max()))
        lo = self._lo
        missing = self._dense[codes - lo if lo else codes] == self._missing
        if missing.any():
            # the distinct new codes (sorted), with nothing else of the batch alive while computing
            new = np.sort(codes[missing])
            del missing
            first = np.ones(len(new), dtype=bool)
            first[1:] = new[1:] != new[:-1]
            new = new[first]
            del first
            results = self._checked(self.compute(new), len(new))
            self._dense[new - lo if lo else new] = results
            self._count += len(new)
            del new, results
        return self._dense[codes - lo if lo else codes].astype(np.int64)

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the dense array to cover codes ``lo..hi`` (with slack on the growing side)."""
        dense = self._dense
        if len(dense) == 0:
            self._lo = lo
            self._dense = np.full(max(hi - lo + 1, 1024), self._missing, dtype=self.dtype)
            return
        cur_lo, cur_hi = self._lo, self._lo + len(dense) - 1
        if lo >= cur_lo and hi <= cur_hi:
            return
        span = cur_hi - cur_lo + 1
        new_lo = min(lo, cur_lo)
        if lo < cur_lo:
            new_lo = max(0, min(lo, cur_lo - span // 2))
        new_hi = max(hi, cur_hi)
        if hi > cur_hi:
            new_hi = max(hi, cur_hi + span // 2)
        grown = np.full(new_hi - new_lo + 1, self._missing, dtype=self.dtype)
        grown[cur_lo - new_lo : cur_lo - new_lo + span] = dense
        self._lo, self._dense = new_lo, grown

    def _to_table(self) -> None:
        known = np.flatnonzero(self._dense != self._missing)
        self._table = KeyTable()
        self._results = np.empty(max(len(known), 16), dtype=self.dtype)
        if len(known):
            idx = self._table.index(known + self._lo)
            self._results[idx] = self._dense[known]
        self._dense = None

    def _call_table(self, codes: np.ndarray) -> np.ndarray:
        if self.full():
            self.clear()
            return self(codes)
        table = self._table
        before = table.n
        idx = table.index(codes)
        if table.n > before:
            new_codes = table.keys[before:]
            try:
                results = self._checked(self.compute(new_codes), len(new_codes))
            except BaseException:
                self._forget(before)
                raise
            if table.n > len(self._results):
                grown = np.empty(max(table.n, 2 * len(self._results)), dtype=self.dtype)
                grown[:before] = self._results[:before]
                self._results = grown
            self._results[before : table.n] = results
            self._count = table.n
        return self._results[idx].astype(np.int64, copy=False)

    def _forget(self, n: int) -> None:
        """Drop the codes numbered from ``n`` on (their results could not be computed); the others
        keep their numbers, which index their results."""
        keys = self._table.keys[:n].copy()
        self._table = KeyTable()
        self._table.append(keys)

    def _checked(self, results, n: int) -> np.ndarray:
        results = np.asarray(results)
        if len(results) != n:
            raise ValueError(f"memo: compute returned {len(results)} results for {n} codes")
        return results.astype(self.dtype, copy=False)

