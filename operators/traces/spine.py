"""A trace: a log-structured spine of immutable ``TrieBatch``es with fueled geometric merging,
shared by reader handles that bound how far it may compact.

Each reader holds a ``TraceHandle`` with a *logical* compaction frontier (the times it still needs to
tell apart: merges may advance times to the meet of all readers' logical frontiers) and a *physical*
one (batches whose ``upper`` is not behind the meet of readers' physical frontiers are not merged, so
a reader can still see batch boundaries there). Dropping a handle releases its holds.

Merging is geometric: adjacent batches whose sizes are within a factor two start a ``Merge``, and every
insertion gives each merge in progress fuel proportional to the inserted size, so no insert pays for a
whole large merge while the number of batches stays logarithmic.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..tuning import DEFAULT, EngineConfig
from ..frontier import Antichain
from ..kernels.lookup import flatten
from ..kernels.lookup import lookup as lookup_kernel
from ..lattice import T_MIN
from .batch import Updates, consolidate, sum_error
from .cursor import TraceCursor
from .handle import Holds, TraceHandle
from ..kernels.merge import cascade as merge_cascade
from ..kernels.trie import build_complete
from ..kernels.trie import size as trie_size
from .merge import Merge, frontier_array, merge_error
from .merge import work as merge_work
from .trie import Description, TrieBatch, int64


_NONE = np.empty(0, dtype=np.int64)  # the address table of no merges (never written)
_PAIRWISE_FROM = 1 << 14  # idle merges of this many updates go pair by pair (Spine._merge_pairwise)
_INT64 = np.dtype(np.int64)


class Spine:
    """A collection of keyed updates indexed by key, as a spine of batches (oldest first)."""

    def __init__(self, depth: int, name: str = "trace", *, config: EngineConfig = DEFAULT) -> None:
        self.depth = depth
        self.fuel_per_update, self.min_fuel = config.merge_fuel_per_update, config.merge_min_fuel
        self.name = name
        self.items: list[TrieBatch | Merge] = []
        self.upper = Antichain([(T_MIN,) * depth])
        self._logical_holds = Holds()
        self._physical_holds = Holds()
        self._since = Antichain([(T_MIN,) * depth])
        self._compacted = Antichain([(T_MIN,) * depth])  # the last logical frontier given out
        self.merge_work = 0
        self._inserted = 0
        self._batch_table: np.ndarray | None = None  # kernel tables of the items, rebuilt after changes
        # the batch table's rows: the first _batch_count rows of _batch_rows (room for appends, which
        # write their row in place; None: rebuilt by the next _table)
        self._batch_rows: np.ndarray | None = None
        self._batch_count = 0
        self._version = 0  # counts the changes of items other than appends
        self._quiet = (-1, 0, 0)  # (version, sealed, fuel) of a _maintain that found nothing to merge
        self._merges: tuple[list[Merge], np.ndarray] | None = None
        self._frontier: tuple[Antichain | None, np.ndarray] = (None, np.empty((0, depth), dtype=np.int64))
        self._one = np.empty((1, depth), dtype=np.int64)  # _frontier_array() of a frontier of one time
        self._scan = 0  # items from here on changed since the last check of the geometric invariant
        self._unsealed = 0  # items from here on were not sealed at that check
        # _sealed()'s last answer: the physical frontier it was for (None: none kept) and how many of the
        # newest items were not sealed for it (merges change only sealed items, and a batch appended
        # after an unsealed one is unsealed too: uppers never go backwards)
        self._sealed_for: Antichain | None = None
        self._unsealed_tail = 0

    # -- readers ---------------------------------------------------------------------------------
    def handle(self) -> TraceHandle:
        return TraceHandle(self)

    def logical_frontier(self) -> Antichain:
        """How far merges may advance times: the meet of readers' holds.

        With no reader, the upper joined with the last frontier given out (a dropped reader may have
        compacted past the upper), so a new handle starts where the trace is exact. Every merge takes
        its frontier from here, and the answers never go backwards, so the last one bounds them all.
        """
        holds = self._logical_holds
        held = holds._frontier  # the meet kept since the holds last moved (else asked for)
        if held is None:
            held = holds.frontier()
        if held._elements:
            self._compacted = held
        else:
            self._compacted = _frontier_join(self.upper, self._compacted)
        return self._compacted

    def physical_frontier(self) -> Antichain:
        holds = self._physical_holds
        held = holds._frontier  # the meet kept since the holds last moved (else asked for)
        if held is None:
            held = holds.frontier()
        return held if held._elements else self.upper

    # -- writing ---------------------------------------------------------------------------------
    def insert(self, updates: Updates, upper: Antichain) -> TrieBatch:
        """Append the keyed ``updates`` (consolidated here) holding all times in ``[self.upper, upper)``."""
        batch = TrieBatch.consolidating(updates, Description((self.upper, upper, self._since)))
        self._append(batch, upper)
        return batch

    def insert_complete(self, keys: np.ndarray, vals: np.ndarray, times: np.ndarray, diffs: np.ndarray,
                        upper: Antichain) -> tuple[TrieBatch | None, Updates | None, np.ndarray | None]:
        """An arrangement's step in one kernel call (:func:`~ddflow.operators.kernels.trie.build_complete`):
        of the keyed updates given as columns (at most ``trie.SMALL``, in any order), those whose time
        is not beyond ``upper`` are consolidated and appended as :meth:`insert` does (then the trace's
        upper is ``upper``). Returns ``(batch, flat, waiting)``: the batch appended (``None`` when no
        update was complete: nothing is appended and the upper stays), its updates as flat columns
        (``(key, val)``, sorted as the batch; ``None`` when it is empty), and the indices of the rows
        beyond ``upper``, ascending (``None`` when there are none)."""
        m, d = diffs.shape[0], self.depth
        if not (keys.dtype == vals.dtype == times.dtype == diffs.dtype == _INT64 and keys.flags.c_contiguous
                and vals.flags.c_contiguous and times.flags.c_contiguous and diffs.flags.c_contiguous):
            keys, vals, times, diffs = int64(keys), int64(vals), int64(times), int64(diffs)
        room = m * (d + 5) + 3  # trie_size(m, m, m, d): room for any result
        buffer = np.empty(room + m * (d + 4), dtype=np.int64)  # the trie, the flat columns, the rows waiting
        out, flat, pending = buffer[:room], buffer[room : room + m * (d + 3)], buffer[room + m * (d + 3) :]
        frontier = upper._array  # the frontier's array, kept while it stays (else made)
        if frontier is None or frontier.shape[1] != d:
            frontier = upper.array(d)
        address, nk, nv, n, end, bad, waiting = build_complete(keys, vals, times, diffs, frontier, out, flat, pending)
        if bad >= 0:
            raise sum_error((int(keys[bad]), int(vals[bad])), tuple(times[bad].tolist()))
        waits = pending[:waiting] if waiting else None
        if waiting == m:
            return None, None, waits
        desc = Description((self.upper, upper, self._since))
        if not n:
            self._append(TrieBatch.empty(d, desc), upper)
            return None, None, waits
        batch = TrieBatch(out[:end], nk, nv, n, d, desc, address)
        self._append(batch, upper)
        columns = Updates((flat[:n], flat[n : 2 * n]), flat[3 * n : 3 * n + n * d].reshape(n, d), flat[2 * n : 3 * n])
        return batch, columns, waits

    def _append(self, batch: TrieBatch, upper: Antichain) -> None:
        """Append a new batch holding all times in ``[self.upper, upper)`` and do an insert's merge work."""
        self.upper = upper
        n = batch.n
        self._inserted += n
        items = self.items
        count = len(items)
        if n:
            if count < self._scan:
                self._scan = count
            items.append(batch)
            count += 1
            rows = self._batch_rows
            if rows is not None:  # the table is the rows written, the new one too (no merge added: the
                written = self._batch_count  # merge table stays)
                if written == rows.shape[0]:  # full: a new buffer of twice the room (tables given out stay)
                    rows = self._batch_rows = np.concatenate([rows, np.empty_like(rows)])
                rows[written] = batch.row
                self._batch_count = written + 1
                self._batch_table = rows[: written + 1]
            else:
                self._batch_table = None
            if self._unsealed_tail:
                self._unsealed_tail += 1
            else:  # the new batch may be sealed: look again
                self._sealed_for = None
        fuel = self.fuel_per_update * n
        if fuel < self.min_fuel:
            fuel = self.min_fuel
        # _maintain's first test without its calls: no merge running, the physical frontier the same
        # object as at the last check (so the sealed items are as many) and nothing changed since
        held, merges, (version, quiet, most) = self._physical_holds._frontier, self._merges, self._quiet
        if (held is not None and held is self._sealed_for and held._elements and merges is not None and not merges[0]
                and version == self._version and fuel <= most and count - self._unsealed_tail == quiet):
            return
        self._maintain(fuel)

    def advance_upper(self, upper: Antichain) -> None:
        self.upper = upper

    def _changed(self) -> None:
        """Forget the kernel tables of the items (after any change of ``self.items``)."""
        self._batch_table = self._batch_rows = None
        self._merges = None
        self._version += 1

    def _frontier_array(self) -> np.ndarray:
        """The logical frontier as the ``(m, depth)`` array kernels take (kept while it does not move;
        a frontier of one time is written into one reused array)."""
        frontier = self.logical_frontier()
        if frontier is not self._frontier[0]:
            elements = frontier._elements
            if len(elements) == 1:
                one = self._one
                one.flags.writeable = True
                one[0] = elements[0]
                one.flags.writeable = False  # read-only as every frontier array: one kernel specialisation
                self._frontier = (frontier, one)
            else:
                self._frontier = (frontier, frontier_array(frontier, self.depth))
        return self._frontier[1]

    def _running(self) -> tuple[list[Merge], np.ndarray]:
        """The merges in progress and the table of their addresses."""
        if self._merges is None:
            merges = [m for m in self.items if type(m) is Merge]
            self._merges = (merges, np.asarray([m.address for m in merges], dtype=np.int64) if merges else _NONE)
        return self._merges

    def _maintain(self, fuel: int) -> None:
        """An insert's merge work: merges in progress get ``fuel`` (one kernel call) and finished ones
        are replaced by their results; the newest batches that may merge do so at once, as far as
        the geometric invariant asks and ``fuel`` allows (one kernel call); any other adjacent pair
        breaking the invariant starts a merge, which gets ``fuel`` at once (and again if it finished
        and another starts)."""
        merges, table = self._merges if self._merges is not None else self._running()
        if not merges:
            sealed = self._sealed()
            version, quiet, most = self._quiet
            if version == self._version and sealed == quiet and fuel <= most:
                return  # nothing changed since a check that found nothing to merge with as much fuel
            version = self._version
        else:
            version = self._version
            if merge_work(merges, self._frontier_array(), fuel, table):
                self._finish()
            sealed = self._sealed()
        started = self._start_merges(self._cascade(fuel, sealed))
        while started and merge_work(started, self._frontier_array(), fuel):
            self._finish()
            started = self._start_merges(self._sealed())
        if version == self._version and not self._merges[0]:  # unchanged: sealed as many as at first
            self._quiet = (version, sealed, fuel)

    def _sealed(self) -> int:
        """How many items, from the oldest, hold no time the physical frontier has not passed: batches
        that may merge (newer ones stay apart so readers can still see their boundaries). While the
        physical frontier stays the same object, the answer follows from the last one (the unsealed
        newest items stay unsealed, and appends to them are unsealed), so a trace inserted into in
        every loop round does not re-read its unsealed batches at each insert."""
        items = self.items
        holds = self._physical_holds  # physical_frontier(), without its call
        physical = holds._frontier
        if physical is None:
            physical = holds.frontier()
        if not physical._elements:
            physical = self.upper
        if physical is self._sealed_for:
            return len(items) - self._unsealed_tail
        n = i = len(items)
        if i:
            p = physical._one
            if p is not None:  # a frontier of one 1-dimensional time: compare ints
                while i:
                    item = items[i - 1]
                    if type(item) is not TrieBatch:
                        break
                    u = item.desc.upper._one
                    if u is None:
                        if item.desc.upper.dominates(physical):
                            break
                    elif u <= p:
                        break
                    i -= 1
            else:
                while i and type(items[i - 1]) is TrieBatch and not items[i - 1].desc.upper.dominates(physical):
                    i -= 1
        self._sealed_for, self._unsealed_tail = physical, n - i
        return i

    def _mark(self, index: int) -> None:
        """Item ``index`` changed: the pairs around it must be checked against the invariant again."""
        if index < self._scan:
            self._scan = index

    def _finish(self) -> None:
        """Replace finished merges by their results, dropping empty ones."""
        items = []
        for item in self.items:
            if type(item) is Merge and item.done:
                self.merge_work += item.work_done
                item = item.result(self._frontier[0])
                self._mark(len(items))
                if not item.n:
                    continue
            items.append(item)
        self.items = items
        self._changed()

    def _cascade(self, fuel: int, sealed: int) -> int:
        """Merge the newest idle sealed batches, from the newest backwards while each older one is at
        most twice what is merged so far and the fuel lasts (one kernel call). Returns how many items
        are sealed afterwards."""
        items = self.items
        hi = sealed
        if hi < 2:
            return sealed
        newest = items[hi - 1]
        if type(newest) is not TrieBatch:
            return sealed
        lo, total = hi - 1, newest.n
        while lo > 0:  # candidates: idle batches within the fuel, none more than twice the rest
            older = items[lo - 1]
            if type(older) is not TrieBatch or older.n > 2 * total or total + older.n > fuel:
                break
            lo -= 1
            total += older.n
        if lo == hi - 1:
            return sealed
        count, n = self._merge_newest(lo, hi, fuel, 2)
        return sealed if count < 2 else sealed - count + (1 if n else 0)

    def _merge_newest(self, lo: int, hi: int, fuel: int, ratio: int) -> tuple[int, int]:
        """Merge the newest of the idle sealed batches ``items[lo:hi]`` into one in one kernel call
        (:func:`~ddflow.operators.kernels.merge.cascade`: from the newest backwards while each older one
        is at most ``ratio`` times what is merged so far, any size for 0, and the reads stay within
        ``fuel``), times advanced to the logical frontier. Returns ``(count, n)``: how many batches were
        replaced by the result (fewer than 2: none), and the result's updates (0: the batches cancelled
        out and are gone)."""
        items = self.items
        keys = vals = total = 0
        for b in items[lo:hi]:
            keys += b.nk
            vals += b.nv
            total += b.n
        rows = np.array([b.row for b in items[lo:hi]], dtype=np.int64)
        out = np.empty(trie_size(keys, vals, total, self.depth), dtype=np.int64)
        count, address, nk, nv, n, end, read = merge_cascade(rows, 0, hi - lo, self._frontier_array(), fuel, out,
                                                             ratio)
        if count < 0:
            raise merge_error(items[lo:hi], nk, nv, self._frontier[0])
        if count < 2:
            return count, 0
        first = hi - count
        self.merge_work += read
        if n:
            if 4 * end < 3 * len(out):  # much cancelled: keep only what is used
                buffer = out[:end].copy()
                address = None
            else:
                buffer = out[:end]
            desc = Description((items[first].desc.lower, items[hi - 1].desc.upper, self._frontier[0]))
            items[first:hi] = [TrieBatch(buffer, nk, nv, n, self.depth, desc, address)]
        else:
            del items[first:hi]
        self._batch_table = self._batch_rows = None  # only batches merged: the merge table stays
        self._version += 1
        if first < self._scan:
            self._scan = first
        return count, n

    def _start_merges(self, sealed: int) -> list[Merge]:
        """Start a merge of each adjacent pair of idle sealed batches violating the geometric invariant,
        among the pairs around items that changed (or were sealed) since the last check."""
        items = self.items
        started: list[Merge] = []
        j = sealed - 1
        stop = self._scan if self._scan < self._unsealed else self._unsealed
        if stop < 1:
            stop = 1
        while j >= stop:
            older, newer = items[j - 1], items[j]
            if type(older) is TrieBatch and type(newer) is TrieBatch and older.n <= 2 * newer.n:
                merge = Merge(older, newer, self.logical_frontier())
                items[j - 1 : j + 1] = [merge]
                started.append(merge)
                j -= 2
            else:
                j -= 1
        self._scan = len(items)
        self._unsealed = sealed - len(started)
        if started:
            self._changed()
        return started

    def exert(self) -> None:
        """Idle work after an epoch: re-merge recent batches whose times the frontier has since collapsed.

        Batches sealed during an epoch hold its many distinct times; once the epoch is complete the
        compaction frontier makes most of them indistinguishable. Merging the newest idle batches
        then (within a budget proportional to what was inserted since the last call, so the work stays
        amortized) keeps the trace close to its compacted size: from the newest backwards, as long as
        the newest two are sealed and each older batch (or, for the newest pair, either) was advanced
        to an older frontier, in one kernel call (pair by pair, :meth:`_merge_pairwise`, from
        ``_PAIRWISE_FROM`` updates on). A trace with nothing inserted since the last call does
        nothing."""
        if not self._inserted:  # idle since the last call: nothing to re-merge
            return
        budget, self._inserted = self.fuel_per_update * self._inserted, 0
        items = self.items
        hi = len(items)
        if hi < 2 or type(items[-1]) is not TrieBatch or self._sealed() < hi:
            return
        frontier = self.logical_frontier()
        lo, stale, total = hi - 1, _stale(items[-1], frontier), items[-1].n
        while lo > 0:
            older = items[lo - 1]
            if type(older) is not TrieBatch or total + older.n > budget:  # the kernel would stop there
                break
            total += older.n
            since = older.desc.since  # _stale(older, frontier), without a call per batch
            if since is not frontier and since._elements != frontier._elements:
                stale = True
            elif lo < hi - 1 or not stale:  # a pair with nothing stale: the merge stops there
                break
            lo -= 1
        if lo < hi - 1:
            if total < _PAIRWISE_FROM:
                self._merge_newest(lo, hi, budget, 0)
            else:
                self._merge_pairwise(lo, hi)

    def _merge_pairwise(self, lo: int, hi: int) -> None:
        """Merge the idle sealed batches ``items[lo:hi]`` into one, the adjacent pair with the fewest
        updates first, one kernel call per pair. A cascade from the newest backwards reads what it
        has merged so far again at every older batch: the few dozen batches of very different sizes
        a large epoch's loop rounds leave would cost ~20 reads per update to merge whole (within its
        fuel it stopped with half of them apart); pair by pair, each update is read a few times
        (about as often as in a balanced tree of merges)."""
        sizes = [b.n for b in self.items[lo:hi]]
        pairs = [a + b for a, b in zip(sizes, sizes[1:])]  # per adjacent pair its updates (min and index: C loops)
        while pairs:
            best = min(pairs)
            j = pairs.index(best)
            count, n = self._merge_newest(lo + j, lo + j + 2, best + 1, 0)
            if count < 2:  # (the fuel covers the pair: never)
                return
            merged = [n] if n else []
            sizes[j : j + 2] = merged
            left, right = max(j - 1, 0), min(j + len(merged), len(sizes) - 1)
            pairs[left : j + 2] = [a + b for a, b in zip(sizes[left:right], sizes[left + 1 : right + 1])]

    # -- reading ---------------------------------------------------------------------------------
    def batches(self) -> Iterator[TrieBatch]:
        for item in self.items:
            if type(item) is Merge:
                yield item.older
                yield item.newer
            else:
                yield item

    def _table(self) -> np.ndarray:
        """Every batch as a row ``(address, nk, nv, n)`` of a kernel table, oldest first."""
        table = self._batch_table
        if table is None:
            rows = self._batch_rows
            if rows is None:  # a new buffer: the tables given out before stay as they were
                listed = []
                for item in self.items:
                    if type(item) is Merge:  # (extending by a tuple: no call per row)
                        listed += (item.older.row, item.newer.row)
                    else:
                        listed += (item.row,)
                count = len(listed)
                rows = self._batch_rows = np.empty((max(2 * count, 8), 4), dtype=np.int64)
                if count:
                    rows[:count] = listed
                self._batch_count = count
            table = self._batch_table = rows[: self._batch_count]  # rows written later lie beyond it
        return table

    def lookup(self, keys: np.ndarray) -> Updates:
        """Every update whose key is in ``keys`` (any int64 keys), unconsolidated across batches: one
        kernel call for the whole trace. The result is sorted by key; within a key, batch by batch
        (oldest first), each by val and time."""
        if type(keys) is not np.ndarray or keys.dtype != _INT64 or not keys.flags.c_contiguous:
            keys = int64(np.asarray(keys))
        table = self._batch_table
        k, v, t, d = lookup_kernel(keys, self._table() if table is None else table, self.depth)
        return Updates((k, v), t, d)

    def contents(self) -> Updates:
        """All updates, consolidated across batches."""
        k, v, t, d = flatten(self._table(), self.depth)
        return consolidate(Updates((k, v), t, d), runs=True)

    def cursor(self) -> TraceCursor:
        return TraceCursor(self.contents())

    # -- sizes -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(len(b) for b in self.batches())

    def stats(self) -> dict[str, int]:
        batches = list(self.batches())
        return {
            "records": sum(len(b) for b in batches),
            "batches": len(batches),
            "bytes": sum(b.nbytes() for b in batches),
            "merge_work": self.merge_work + sum(m.work_done for m in self.items if type(m) is Merge),
        }


def _stale(batch: TrieBatch, frontier: Antichain) -> bool:
    """True when ``batch`` may have been advanced to another frontier than ``frontier`` (its times
    listed in another order count as another: merging again is never wrong)."""
    since = batch.desc.since
    return since is not frontier and since._elements != frontier._elements


def _frontier_join(a: Antichain, b: Antichain) -> Antichain:
    """The frontier of times beyond both ``a`` and ``b``: minimal joins of their elements."""
    return Antichain(tuple(max(x, y) for x, y in zip(e, f)) for e in a for f in b)


