"""Reader handles: a reader's hold on how far a trace may compact.

A handle holds a *logical* compaction frontier (the times its reader still needs to tell apart) and a
*physical* one (batch boundaries its reader still needs to see). The trace compacts only to the meet
of its live handles' frontiers; ``drop`` releases a handle's holds.

Holds are released only by ``drop``: a handle that is merely forgotten (no reference left, never
dropped) keeps holding the trace at its frontiers, because compaction never waits for the garbage
collector. A reader that stops reading drops its handle.
"""

from __future__ import annotations

import numpy as np

from ..errors import CompactionError
from ..frontier import Antichain
from .batch import Updates


class Holds:
    """The frontiers a trace's readers hold, counted per frontier: the trace may compact to their
    meet. Readers of one trace usually stand at one frontier (the frontier they are all stepped
    with), so moving a reader is two dict updates and the meet is that frontier itself, the same
    object, until the readers part.

    Equal frontiers are one entry, keyed by the frozenset of their times (made and hashed in C: no
    Python call per reader move), holding the first of them given and how many hold it."""

    __slots__ = ("_counts", "_frontier")

    def __init__(self) -> None:
        self._counts: dict[frozenset, list] = {}  # frozenset of times -> [the frontier, holders]
        self._frontier: Antichain | None = None

    def update_frontier(self, old: Antichain | None, new: Antichain | None) -> None:
        """Replace one holder's frontier ``old`` by ``new`` (either may be ``None``: a holder arrives
        or leaves). ``old`` must be held."""
        counts = self._counts
        if new is not None:
            key = frozenset(new._elements)
            if key in counts:
                counts[key][1] += 1
            else:
                counts[key] = [new, 1]
        if old is not None:
            key = frozenset(old._elements)
            entry = counts[key] if key in counts else None
            if entry is None:
                raise CompactionError(f"no reader holds the frontier {old}")
            if entry[1] == 1:
                del counts[key]
            else:
                entry[1] -= 1
        self._frontier = None

    def frontier(self) -> Antichain:
        """The meet of the held frontiers (the empty antichain when nothing is held)."""
        f = self._frontier
        if f is None:
            counts = self._counts
            if len(counts) == 1:
                (key,) = counts
                f = counts[key][0]
            else:
                f = Antichain(t for key in counts for t in key)
            self._frontier = f
        return f

    def holders(self) -> int:
        """How many holders hold a frontier."""
        return sum(count for _, count in self._counts.values())

    def is_empty(self) -> bool:
        """True when no holder holds a time."""
        return self.frontier().is_empty()


class TraceHandle:
    """A reader's hold on a trace (a :class:`~ddflow.operators.traces.spine.Spine`, which imports this
    module): the trace never compacts past this handle's frontiers."""

    def __init__(self, trace) -> None:
        self.trace = trace
        self.logical = trace.logical_frontier()
        self.physical = trace.physical_frontier()
        trace._logical_holds.update_frontier(None, self.logical)
        trace._physical_holds.update_frontier(None, self.physical)
        self._dropped = False

    def set_logical_compaction(self, frontier: Antichain) -> None:
        """Allow the trace to advance times to ``frontier`` (must not go backwards)."""
        if frontier == self.logical:
            return
        self._check(frontier, self.logical, "logical")
        self.trace._logical_holds.update_frontier(self.logical, frontier)
        self.logical = frontier

    def set_physical_compaction(self, frontier: Antichain) -> None:
        """Allow the trace to merge batches whose upper is at or behind ``frontier``."""
        if frontier == self.physical:
            return
        self._check(frontier, self.physical, "physical")
        self.trace._physical_holds.update_frontier(self.physical, frontier)
        self.physical = frontier

    def set_compaction(self, frontier: Antichain) -> None:
        """Both :meth:`set_logical_compaction` and :meth:`set_physical_compaction` to ``frontier`` (one
        check when the two frontiers are the same, as they are after a first call)."""
        if self.physical is not self.logical:
            self.set_logical_compaction(frontier)
            self.set_physical_compaction(frontier)
            self.physical = self.logical
            return
        if frontier == self.logical:
            return
        self._check(frontier, self.logical, "logical")
        self.trace._logical_holds.update_frontier(self.logical, frontier)
        self.trace._physical_holds.update_frontier(self.physical, frontier)
        self.logical = self.physical = frontier

    def _check(self, new: Antichain, old: Antichain, what: str) -> None:
        if self._dropped:
            raise CompactionError("trace handle already dropped")
        if not old.dominates(new):
            raise CompactionError(f"{what} compaction frontier moved backwards: {old} -> {new}")

    def lookup(self, keys: np.ndarray) -> Updates:
        """The trace's updates whose key is in ``keys`` (see :meth:`Spine.lookup`)."""
        if self._dropped:
            raise CompactionError("trace handle already dropped")
        return self.trace.lookup(keys)

    def table(self) -> np.ndarray:
        """The trace's batches as the table lookup kernels take (see :meth:`Spine.lookup`), for a
        kernel that looks keys up itself; valid until the trace next changes."""
        if self._dropped:
            raise CompactionError("trace handle already dropped")
        table = self.trace._batch_table
        return self.trace._table() if table is None else table

    def drop(self) -> None:
        """Release this reader's holds (idempotent); the handle cannot be used afterwards."""
        if not self._dropped:
            self.trace._logical_holds.update_frontier(self.logical, None)
            self.trace._physical_holds.update_frontier(self.physical, None)
            self._dropped = True

    @property
    def dropped(self) -> bool:
        """True once :meth:`drop` was called."""
        return self._dropped
