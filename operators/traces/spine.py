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

from ..config import DEFAULT, EngineConfig
from ..frontier import Antichain, MutableAntichain
from ..kernels.sorting import distinct
from ..lattice import T_MIN
from .batch import Updates, concat, consolidate
from .cursor import TraceCursor
from .handle import TraceHandle
from .merge import Merge
from .trie import Description, TrieBatch


class Spine:
    """A collection of keyed updates indexed by key, as a spine of batches (oldest first)."""

    def __init__(self, depth: int, name: str = "trace", *, config: EngineConfig = DEFAULT) -> None:
        self.depth = depth
        self.fuel_per_update, self.min_fuel = config.merge_fuel_per_update, config.merge_min_fuel
        self.name = name
        self.items: list[TrieBatch | Merge] = []
        self.upper = Antichain([(T_MIN,) * depth])
        self._logical_holds = MutableAntichain()
        self._physical_holds = MutableAntichain()
        self._since = Antichain([(T_MIN,) * depth])
        self._compacted = Antichain([(T_MIN,) * depth])  # the last logical frontier given out
        self.merge_work = 0
        self._inserted = 0

    # -- readers ---------------------------------------------------------------------------------
    def handle(self) -> TraceHandle:
        return TraceHandle(self)

    def logical_frontier(self) -> Antichain:
        """How far merges may advance times: the meet of readers' holds.

        With no reader, the upper joined with the last frontier given out (a dropped reader may have
        compacted past the upper), so a new handle starts where the trace is exact. Every merge takes
        its frontier from here, and the answers never go backwards, so the last one bounds them all.
        """
        if self._logical_holds.is_empty():
            self._compacted = _frontier_join(self.upper, self._compacted)
        else:
            self._compacted = self._logical_holds.frontier()
        return self._compacted

    def physical_frontier(self) -> Antichain:
        if self._physical_holds.is_empty():
            return self.upper
        return self._physical_holds.frontier()

    # -- writing ---------------------------------------------------------------------------------
    def insert(self, updates: Updates, upper: Antichain) -> TrieBatch:
        """Append the consolidated keyed ``updates`` holding all times in ``[self.upper, upper)``."""
        u = consolidate(updates)
        batch = TrieBatch.from_updates(u, Description(self.upper, upper, self._since))
        self.upper = upper
        self._inserted += len(batch)
        if len(batch):
            self.items.append(batch)
        self._maintain(max(self.min_fuel, self.fuel_per_update * len(batch)))
        return batch

    def advance_upper(self, upper: Antichain) -> None:
        self.upper = upper

    def _maintain(self, fuel: int) -> None:
        while True:
            frontier = self.logical_frontier()
            for item in reversed(self.items):
                if isinstance(item, Merge):
                    item.work(fuel, frontier)
            changed = False
            for i, item in enumerate(self.items):
                if isinstance(item, Merge) and item.done:
                    self.merge_work += item.work_done
                    result = item.result()
                    self.items[i] = result
                    changed = True
            self.items = [b for b in self.items if isinstance(b, Merge) or len(b)]
            changed |= self._start_merges()
            if not changed:
                return

    def _start_merges(self) -> bool:
        """Start a merge of each adjacent pair of idle batches violating the geometric invariant."""
        physical = self.physical_frontier()
        started = False
        j = len(self.items) - 1
        while j >= 1:
            older, newer = self.items[j - 1], self.items[j]
            if (
                isinstance(older, TrieBatch)
                and isinstance(newer, TrieBatch)
                and len(older) <= 2 * len(newer)
                and older.desc.upper.dominates(physical)
                and newer.desc.upper.dominates(physical)
            ):
                self.items[j - 1 : j + 1] = [Merge(older, newer, self.logical_frontier())]
                started = True
                j -= 2
            else:
                j -= 1
        return started

    def exert(self) -> None:
        """Idle work after an epoch: re-merge recent batches whose times the frontier has since collapsed.

        Batches sealed during an epoch hold its many distinct times; once the epoch is complete the
        compaction frontier makes most of them indistinguishable. Merging the newest idle batches
        then (within a budget proportional to what was inserted since the last call, so the work stays
        amortized) keeps the trace close to its compacted size."""
        budget, self._inserted = self.fuel_per_update * self._inserted, 0
        frontier = self.logical_frontier()
        physical = self.physical_frontier()
        while budget > 0 and len(self.items) >= 2:
            older, newer = self.items[-2], self.items[-1]
            if not (isinstance(older, TrieBatch) and isinstance(newer, TrieBatch)):
                break
            size = len(older) + len(newer)
            stale = older.desc.since != frontier or newer.desc.since != frontier
            if size > budget or not stale or not (older.desc.upper.dominates(physical)
                                                  and newer.desc.upper.dominates(physical)):
                break
            merge = Merge(older, newer, frontier)
            merge.work(size + 1)
            self.merge_work += merge.work_done
            self.items[-2:] = [merge.result()]
            if not len(self.items[-1]):
                self.items.pop()
            budget -= size

    # -- reading ---------------------------------------------------------------------------------
    def batches(self) -> Iterator[TrieBatch]:
        for item in self.items:
            if isinstance(item, Merge):
                yield item.older
                yield item.newer
            else:
                yield item

    def lookup(self, keys: np.ndarray) -> Updates:
        """Every update (unconsolidated across batches) whose key is in ``keys``."""
        query = np.asarray(keys, dtype=np.int64)
        if len(query) > 1 and not (query[1:] > query[:-1]).all():
            query = distinct(query)
        parts = [b.lookup(query) for b in self.batches()]
        return concat(parts, 2, self.depth)

    def contents(self) -> Updates:
        """All updates, consolidated across batches."""
        return consolidate(concat([b.flat() for b in self.batches()], 2, self.depth), runs=True)

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
            "merge_work": self.merge_work + sum(m.work_done for m in self.items if isinstance(m, Merge)),
        }


def _frontier_join(a: Antichain, b: Antichain) -> Antichain:
    """The frontier of times beyond both ``a`` and ``b``: minimal joins of their elements."""
    return Antichain(tuple(max(x, y) for x, y in zip(e, f)) for e in a for f in b)


