"""Arrangements: a collection indexed by key in a shared trace, plus the stream of its new batches.

The public handle on one is :class:`ddflow.operators.arranged.Arranged`.

``arrange_by_key`` indexes ``(key, val)`` records; ``arrange_by_self`` indexes whole records (key = the
record, val = ``()``). Every reader (join, reduce, semijoin, ...) holds a handle on the same trace and
receives each new batch; the trace compacts only as far as the meet of its readers' frontiers.
"""

from __future__ import annotations

import numpy as np

from ..frontier import Antichain
from ..graph import Node, Scope
from ..kernels.trie import SMALL
from ..traces.batch import Updates, concat
from ..traces.spine import Spine, TraceHandle


class Arrange(Node):
    """Seals complete updates into batches of a trace, and forwards each batch to its readers.

    Readers may assume that every batch they receive holds only times complete for the frontier of
    the pass that sends it (and so for every later one): they take their buffers whole."""

    observes_frontier = True  # the trace's upper follows the frontier

    def __init__(self, scope: Scope, *, by_self: bool, name: str, source: Node | None = None) -> None:
        super().__init__(scope, name=name)
        self.by_self = by_self
        self.source = source  # the node whose collection this arranges (names the arrangement)
        self.trace = Spine(scope.depth, name, config=self.tuning)
        self.pair_columns = not by_self  # (key, val) records as two columns: no pair id to split
        self._interner = self.interner  # the dataflow's (read in every step)
        self.unit = self._interner.id(())
        # a column of ``unit``s: a fused step's by_self vals are a slice of it (the kernel only reads them)
        self._units = np.empty(0, dtype=np.int64)

    # where its updates come from with several workers (`ddflow.operators.placement`), set where the
    # graph is built: the exchange before it in its scope, the collection it arranges, and whether a
    # caller was handed it (`arrange_by_key`/`arrange_by_self`: its exchange's routing never changes)
    exchange = None
    origin = None
    shared = False

    fused = False  # set by the plan executor: small steps seal in one kernel call (Spine.insert_complete)

    def step(self, frontier: Antichain) -> None:
        if not self.buffers[0]:  # nothing to seal: the upper follows the frontier
            upper = self.trace.upper
            if upper is not frontier and upper != frontier:
                self.trace.upper = frontier  # Spine.advance_upper, without its call
            return
        if self.fused and self._step_fused(frontier):
            return
        if self.by_self:
            u = self.take_complete(frontier)
            ids = u.data[0]
            keyed = Updates((ids, np.full(len(ids), self.unit, dtype=np.int64)), u.times, u.diffs)
        else:
            self.buffers[0] = self._keyed(self.buffers[0])
            keyed = u = self.take_complete(frontier, width=2)
        if len(u):
            batch = self.trace.insert(keyed, frontier)
            if len(batch) and self.consumers:
                self.emit(batch.flat())
        elif self.trace.upper != frontier:
            self.trace.advance_upper(frontier)

    def _step_fused(self, frontier: Antichain) -> bool:
        """The step of at most ``trie.SMALL`` buffered updates in one kernel call: the complete ones are
        sealed into a batch and forwarded, the others stay buffered. False (nothing done) for more
        updates, or none."""
        parts = self.buffers[0]
        if not parts:
            return False
        if self.by_self:
            u = concat(parts, 1, self.scope.depth) if parts[1:] else parts[0]
            if u.diffs.shape[0] > SMALL:
                return False
            ids = u.data[0]
            units = self._units
            if units.shape[0] < ids.shape[0]:
                units = self._units = np.full(max(ids.shape[0], 2 * units.shape[0], 64), self.unit, dtype=np.int64)
            keys, vals = ids, units[: ids.shape[0]]
        else:
            if (parts[0].diffs.shape[0] if not parts[1:] else sum(p.diffs.shape[0] for p in parts)) > SMALL:
                return False
            parts = self.buffers[0] = self._keyed(parts)
            u = concat(parts, 2, self.scope.depth) if parts[1:] else parts[0]
            keys, vals = u.data
        batch, flat, waiting = self.trace.insert_complete(keys, vals, u.times, u.diffs, frontier)
        if waiting is None:
            self.buffers[0] = []
        elif waiting.shape[0] < u.diffs.shape[0]:
            self.buffers[0] = [u.take(waiting)]
        else:  # every row waits: the buffer stays as it was (as one batch)
            self.buffers[0] = [u]
        if batch is None:
            upper = self.trace.upper
            if upper is not frontier and upper != frontier:
                self.trace.upper = frontier  # Spine.advance_upper, without its call
        elif flat is not None and self.consumers:
            self.emit(flat)
        return True

    def _keyed(self, parts: list[Updates]) -> list[Updates]:
        """``parts`` as ``(key, val)`` columns: batches of record ids split (each record must be a
        pair), batches of pair columns as they are."""
        split = self._interner.split
        return [p if len(p.data) == 2 else Updates(split(p.data[0], self.name), p.times, p.diffs) for p in parts]

    def reader(self, node: Node, port: int) -> TraceHandle:
        """Subscribe ``node``'s ``port`` to new batches; return its handle on the trace."""
        self.connect(node, port)
        return self.trace.handle()

    @property
    def label(self) -> str:
        """The arrangement's name in metrics: the name given it (``Arranged.name``), else its
        collection's label and how it is keyed (``views.by_key``, ``map(parse_view).by_self``),
        else ``name``."""
        if self._label:
            return self._label
        if self.source is not None:
            return f"{self.source.label}.{'by_self' if self.by_self else 'by_key'}"
        return self.name

    @label.setter
    def label(self, value: str) -> None:
        self._label = value

    def arrangements(self):
        return ((self.label, self.trace),)

