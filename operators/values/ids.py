"""The id layout: what a record id means, where its value is kept, and how ids are given back.

An id is an int64 below ``ID_LIMIT`` (2**31), so that two of them pack into one int64 *pair code*
``first << 32 | second``. Each id in use has a *kind* and an int64 *payload*, in two columns indexed
by id:

    INT       an int in int64 range; payload: the int
    PAIR      a plain 2-tuple; payload: the pair code of its components' ids
    OBJ       any other hashable value, kept as a Python object by the interner; payload unused
    OBJ_INT   an object equal to an int (``True``, ``1.0``) seen before that int; payload: the int
    OBJ_PAIR  a tuple subclass of two items seen before the plain pair it equals; payload: its code
    FREE      not in use (reclaimed, or never handed out below the high-water mark)

Two compiled hash tables map payloads back to ids: ints (INT and OBJ_INT ids) and pair codes (PAIR
and OBJ_PAIR ids), so interning a column of ints or pairs is one kernel call. A PAIR or OBJ_PAIR id
*refers to* its two components: they are in use as long as it is.

One *run* of ints may bypass the ints' table: a column of ints that covers a dense range
``lo <= v < hi`` of ints not seen yet (at least ``RUN_MIN`` of them, repeats allowed) gives them the
consecutive ids ``base + (v - lo)``, found again by that offset, unhashed. The run's ids are INT ids
like any other (kinds and payloads in the columns); they stay out of the table until a reclaim gives
one of them back, when the run ends and the rest of its ids enter the table.

Ids are given back: :meth:`IdSpace.reclaim` takes the ids found reachable from everything the
dataflow holds (see :mod:`ddflow.operators.values.sweep`), marks the rest FREE, hands them out again
(lowest first) and rebuilds the tables from the ids still in use, so memory follows the records
alive, not every record ever seen. Running out of ids raises :class:`IdLimitError`.
"""

from __future__ import annotations

import numpy as np

from ..errors import IdLimitError
from ..kernels import columns
from ..kernels import hashtable as ht
from ..kernels import reclaim

SHIFT = 32
ID_LIMIT = 1 << 31  # ids are below this
LOW = (1 << 31) - 1  # the second id of a pair code: code & LOW

INT, PAIR, OBJ, OBJ_INT, OBJ_PAIR, FREE = range(6)
COMPOSITE = np.array([False, True, False, False, True, False, False, False], dtype=bool)
_INT_TABLE = np.array([True, False, False, True, False, False, False, False])  # kinds in the ints' table
_PAIR_TABLE = np.array([False, True, False, False, True, False, False, False])  # kinds in the pairs' table
_OBJECT_KINDS = np.array([False, False, True, True, True, False, False, False])  # kinds kept as objects
RUN_MIN = 1 << 12  # a run of ints spans at least this many ints


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 pair code per pair of ids."""
    codes = a.astype(np.int64)  # a new array: shifted in place
    codes <<= SHIFT
    codes |= b
    return codes


def unpack(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids ``(first, second)`` of pair codes."""
    return codes >> SHIFT, codes & LOW


class _Table:
    """A compiled hash table from payloads to the ids of some kinds (its buckets, their tags, and the
    count of full ones)."""

    __slots__ = ("slots", "tags", "count")

    def __init__(self) -> None:
        self.slots, self.tags = ht.empty()
        self.count = 0


class IdSpace:
    """Ids in use with their kinds and payloads, the tables from payloads back to ids, and the free
    list. ``limit`` (at most ``ID_LIMIT``) bounds the ids handed out."""

    def __init__(self, *, limit: int = ID_LIMIT) -> None:
        if not 0 < limit <= ID_LIMIT:
            raise ValueError(f"id limit must be in 1..{ID_LIMIT}, got {limit}")
        self.limit = limit
        self.kinds = np.full(16, FREE, dtype=np.int8)
        self.payload = np.zeros(16, dtype=np.int64)
        self.next = 0  # ids >= next have never been handed out since the last reclaim
        self._free = np.empty(0, dtype=np.int64)  # free ids below next, highest first (popped from the end)
        self._nfree = 0
        self.ints = _Table()
        self.pairs = _Table()
        # the run: ints run_lo <= v < run_hi have the ids run_base + (v - run_lo), not in the ints' table
        self.run_lo = self.run_hi = self.run_base = 0

    def in_use(self) -> int:
        """Ids handed out and not given back."""
        return self.next - self._nfree

    def nbytes(self) -> int:
        return (self.kinds.nbytes + self.payload.nbytes + self._free.nbytes + self.ints.slots.nbytes
                + self.ints.tags.nbytes + self.pairs.slots.nbytes + self.pairs.tags.nbytes)

    # -- handing ids out -----------------------------------------------------------------------------
    def find(self, table: _Table, keys: np.ndarray) -> np.ndarray:
        """The id of each payload in ``table`` (``self.ints`` or ``self.pairs``), ``-1`` if none."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if table.count == 0:
            out = np.full(len(keys), -1, dtype=np.int64)
        else:
            out = ht.find_tagged(table.slots, table.tags, self.payload, keys)
        if table is self.ints and self.run_hi > self.run_lo:
            inside = (keys >= self.run_lo) & (keys < self.run_hi)
            out[inside] = keys[inside] + (self.run_base - self.run_lo)
        return out

    def intern(self, table: _Table, kind: int, keys: np.ndarray, *, in_place: bool = False) -> np.ndarray:
        """The id of each payload in ``table``, new ids of ``kind`` for payloads not there yet (ints of a
        dense range not seen yet start the run, when there is none). ``in_place``: ``keys`` is a
        contiguous int64 column the caller gives up, and the ids may be written over it."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if table is not self.ints:
            return self._insert(table, kind, keys, in_place)
        if self.run_hi == self.run_lo and len(keys) >= RUN_MIN and self._start_run(keys):
            return keys + (self.run_base - self.run_lo)  # the run is these keys' range
        if self.run_hi == self.run_lo:
            return self._insert(table, kind, keys, in_place)
        inside = (keys >= self.run_lo) & (keys < self.run_hi)
        offset = self.run_base - self.run_lo
        if False not in inside:  # (inside.all(), without the calls of its Python wrapper)
            return keys + offset
        if True not in inside:  # (a column of hashes, say): no gather and scatter around the table's call
            return self._insert(table, kind, keys, in_place)
        out = np.empty(len(keys), dtype=np.int64)
        out[inside] = keys[inside] + offset
        outside = ~inside
        out[outside] = self._insert(table, kind, keys[outside])
        return out

    def _start_run(self, keys: np.ndarray) -> bool:
        """Make ``keys`` the run when they cover a dense range of ints (of at least ``RUN_MIN``, at most
        ``len(keys)``) none of which has an id yet: fresh ids from ``next`` on, one per int of the
        range, in its order (the free list waits for later ids). Returns whether it did."""
        lo, hi = int(keys.min()), int(keys.max()) + 1
        span = hi - lo
        if span < RUN_MIN or span > len(keys) or self.next + span > self.limit or lo < -(1 << 62):
            return False
        if not columns.covers_range(keys, lo, span):
            return False
        table = self.ints
        if table.count:  # none of them may be in the table yet: its keys scanned, or the range looked up
            if len(table.slots) <= span:
                held = self.payload.take(table.slots[table.slots >= 0])
                if ((held >= lo) & (held < hi)).any():
                    return False
            elif (ht.find_tagged(table.slots, table.tags, self.payload, np.arange(lo, hi, dtype=np.int64))
                  >= 0).any():
                return False
        self._grow(span, span)
        base = self.next
        self.kinds[base : base + span] = INT
        columns.fill_range(self.payload[base : base + span], lo)
        self.next += span
        self.run_lo, self.run_hi, self.run_base = lo, hi, base
        return True

    def _insert(self, table: _Table, kind: int, keys: np.ndarray, in_place: bool = False) -> np.ndarray:
        """The id of each payload in ``table`` (by the table alone), new ids of ``kind`` for the others
        (written over ``keys`` when ``in_place``)."""
        parts = []
        insert = ht.insert_tagged_into if in_place else ht.insert_tagged
        while True:
            nfree, first = self._nfree, self.next
            out, table.slots, table.tags, table.count, self._nfree, self.next, done = insert(
                table.slots, table.tags, self.payload, keys, table.count, self._free, self._nfree, self.next,
                self.limit)
            if self._nfree < nfree:
                self.kinds[self._free[self._nfree : nfree]] = kind
            if self.next > first:
                self.kinds[first : self.next] = kind
            if done == len(keys):
                return np.concatenate([*parts, out]) if parts else out
            parts.append(out[:done])
            keys = keys[done:]
            self._grow(1, len(keys))  # the columns were full: room for the rest of the batch if new

    def new(self, kind: int, payload: np.ndarray) -> np.ndarray:
        """Fresh ids of ``kind`` with these payloads, in no table (objects)."""
        n = len(payload)
        take = min(n, self._nfree)
        ids = self._free[self._nfree - take : self._nfree][::-1].copy()
        self._nfree -= take
        if n > take:
            self._grow(n - take, n - take)
            ids = np.concatenate([ids, np.arange(self.next, self.next + n - take, dtype=np.int64)])
            self.next += n - take
        self.kinds[ids] = kind
        self.payload[ids] = payload
        return ids

    def add(self, table: _Table, ids: np.ndarray) -> None:
        """Put ids whose payloads are distinct and not in ``table`` yet into it (objects equal to ints or
        pairs): inserted as new keys whose values come from a free list holding exactly these ids."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        _out, table.slots, table.tags, table.count, _nfree, _next, _done = ht.insert_tagged(
            table.slots, table.tags, self.payload, self.payload[ids], table.count, ids[::-1].copy(), len(ids),
            self.next, self.limit)

    def reserve(self, n: int) -> None:
        """Room in the columns for ``n`` more new ids than the free list holds (as far as the limit
        allows), in one grow: a caller about to intern several columns of mostly new values saves
        the copies of growing the columns once per column."""
        size = min(self.next + max(0, n - self._nfree), self.limit)
        if size > len(self.kinds):
            self._resize(size)

    def reserve_table(self, table: _Table, n: int) -> None:
        """Buckets in ``table`` (``self.ints`` or ``self.pairs``) for ``n`` more keys, grown (by half
        at least) and rebuilt from the ids in use only when they would not fit: a caller about to
        intern a large column in slices saves the table's growing once per slice."""
        capacity = ht.capacity_for(table.count + n)
        if capacity <= len(table.slots):
            return
        wanted = _INT_TABLE if table is self.ints else _PAIR_TABLE
        size = max(capacity, len(table.slots) + len(table.slots) // 2 + 1)
        if table.count == 0:  # nothing to place: no pass over the ids
            table.slots, table.tags = ht.empty(size)
            return
        table.slots, table.tags = ht.build(self.payload, self.kinds, wanted, self.next, size, *self._skipped(table))

    def _grow(self, need: int, want: int) -> None:
        """Room in the columns for ``need`` more ids beyond ``next`` (:class:`IdLimitError` past the
        limit) and, the limit allowing, for ``want`` (a batch of new keys grows them once) or a quarter
        more than now, whichever is more."""
        if self.next + need > self.limit:
            raise IdLimitError(
                f"out of record ids: {self.in_use():,} ids are in use (records, the pairs inside them and "
                f"their components, in every trace, pending batch and capture) and {need:,} more are "
                f"needed, but ids stop at {self.limit:,}")
        if self.next + need <= len(self.kinds):
            return
        self._resize(min(max(self.next + want, len(self.kinds) + len(self.kinds) // 4 + 16), self.limit))

    def _resize(self, size: int) -> None:
        """Columns of ``size`` ids (at least ``next``), keeping the ids below ``next``."""
        kinds = np.full(size, FREE, dtype=np.int8)
        kinds[: self.next] = self.kinds[: self.next]
        payload = np.zeros(size, dtype=np.int64)
        payload[: self.next] = self.payload[: self.next]
        self.kinds, self.payload = kinds, payload

    # -- giving ids back -----------------------------------------------------------------------------
    def marks(self) -> np.ndarray:
        """An empty mark set for :meth:`mark` and :meth:`reclaim`."""
        return np.zeros(self.next, dtype=bool)

    def mark(self, roots: np.ndarray, marks: np.ndarray) -> None:
        """Mark ``roots`` and every id they refer to, transitively."""
        if len(roots):
            reclaim.mark(np.ascontiguousarray(roots, dtype=np.int64), marks, self.kinds, COMPOSITE, self.payload)

    def reclaim(self, marks: np.ndarray) -> tuple[int, np.ndarray]:
        """Give back every id in use that is not marked; returns how many, and those of them that were
        objects' (OBJ, OBJ_INT, OBJ_PAIR). Ids still marked keep their number; freed ones are handed out
        again, lowest first; the tables and columns shrink to fit."""
        freed, objects, self._free, self.next = reclaim.sweep(self.kinds, marks, self.next, FREE, _OBJECT_KINDS)
        self._nfree = len(self._free)
        run = self.run_base, self.run_base + (self.run_hi - self.run_lo)
        if freed and run[1] > run[0] and (self.kinds[run[0] : run[1]] == FREE).any():
            self.run_lo = self.run_hi = self.run_base = 0  # the run ends: its ids in use enter the table
        n = self.next
        if len(self.kinds) > max(64, 2 * n):  # the columns shrink with the ids in use
            size = max(16, n + n // 4)
            self.kinds, self.payload = self.kinds[:size].copy(), self.payload[:size].copy()
        if freed:  # the tables hold ids by number: untouched when every id in use stays
            self._rebuild(self.ints)
            self._rebuild(self.pairs)
        return freed, objects

    def _rebuild(self, table: _Table) -> None:
        wanted = _INT_TABLE if table is self.ints else _PAIR_TABLE
        n = self.next
        lo, hi = self._skipped(table)
        count = int(np.count_nonzero(wanted.take(self.kinds[:n]))) - (hi - lo)
        table.slots, table.tags = ht.build(self.payload, self.kinds, wanted, n, ht.capacity_for(count + count // 4),
                                           lo, hi)
        table.count = count

    def _skipped(self, table: _Table) -> tuple[int, int]:
        """The ids that ``table`` does not hold although their kinds are its: the run's, for the ints."""
        if table is self.ints and self.run_hi > self.run_lo:
            return self.run_base, self.run_base + (self.run_hi - self.run_lo)
        return 0, 0
