"""The dataflow graph: scopes, nodes and the streams of update batches between them.

A *scope* is the outer dataflow (times ``(t,)``) or the body of an ``iterate`` (times extended by a loop
counter). Each node belongs to one scope; its nodes are kept in a topological order (the only cycle is
a loop's feedback edge, which delays by one iteration), so one pass over them in order does all work
that a frontier allows. A node buffers what it receives, acts on updates whose times are complete for
the frontier it is stepped with, and reports the times of the work it still holds, so the scope that
drives it knows when to step it again.

Scheduling is incremental: a scope keeps the set of nodes that hold work (buffered updates, or state
such as a reduction's pending times), added to when a node receives updates and left when a step
leaves it with nothing. A pass steps only those, plus the nodes that observe the frontier itself
(traces advancing their upper and compaction, captures, loops) when the frontier has changed since
their last step; a node with no work at the frontier costs a membership test.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .context import Context
from .errors import DiffError, GraphError, UserFunctionError
from .frontier import Antichain
from .traces.batch import Updates, beyond_split, concat


class Scope:
    """A timestamp domain of ``depth`` coordinates and the nodes that run in it; ``context`` is what
    the dataflow's nodes share (interner, tuning, worker)."""

    def __init__(self, context: Context, depth: int, parent: Scope | None = None, loop=None) -> None:
        self.context, self.depth, self.parent, self.loop = context, depth, parent, loop
        self.nodes: list[Node] = []
        self.holding: set[Node] = set()  # nodes that may hold work: buffered updates or pending state
        self._inputs_end = 0  # Enter nodes go first: they have no input inside the scope
        self.building: list[Node] = []  # loops whose body is being built: new nodes go before them

    def add(self, node: Node, *, first: bool = False) -> None:
        if self.context.started:
            raise GraphError("the graph cannot change after df.run(): build every operator first")
        if first:
            self.nodes.insert(self._inputs_end, node)
            self._inputs_end += 1
        elif self.building:
            # made while a loop's body is built (e.g. an outer map entered into the body): the loop
            # must see its output in the same pass, so it goes before the loop
            self.nodes.insert(self.nodes.index(self.building[0]), node)
        else:
            self.nodes.append(node)

    def ancestors(self) -> list[Scope]:
        out, s = [], self
        while s is not None:
            out.append(s)
            s = s.parent
        return out

    def step(self, frontier: Antichain) -> None:
        """One pass over the nodes in order: step each node that holds work, or that observes the
        frontier and has not yet seen ``frontier`` (compared by identity: callers pass one object per
        frontier they drive with)."""
        holding = self.holding
        node = None
        try:
            for node in self.nodes:
                if node in holding:
                    node.step(frontier)
                    node.seen = frontier
                    if not node.holds_work():
                        holding.discard(node)
                elif node.observes_frontier and node.seen is not frontier:
                    node.step(frontier)
                    node.seen = frontier
                    if node.holds_work():
                        holding.add(node)
        except DiffError as exc:
            located = at_node(exc, node)
            if located is None:
                raise
            raise located from exc
        except UserFunctionError as exc:
            locate_failure(exc, node)
            raise

    def complete_work(self, frontier: Antichain) -> bool:
        """True when some node holds work at a time not beyond ``frontier``."""
        for node in self.holding:
            times = node.pending_times()
            if len(times) and not frontier.beyond(times).all():
                return True
        return False

    def pending_times(self) -> np.ndarray:
        """The times of all work held by this scope's nodes."""
        parts = [n.pending_times() for n in self.holding]
        parts = [p for p in parts if len(p)]
        return np.concatenate(parts) if parts else np.empty((0, self.depth), dtype=np.int64)


class Node:
    """A dataflow operator: input ports with buffers, and consumers of its output.

    The protocol a node follows with its scope:

    * ``step(frontier)`` does the work the frontier allows: it may act on buffered updates at times
      not beyond ``frontier`` (all of them, for a linear node) and ``emit`` results to its consumers.
      A node may assume it is stepped with frontiers that never go backwards within its scope's
      round structure, and that every update it was pushed is buffered until a step takes it.
    * ``holds_work()`` says whether it still holds anything (buffered updates or pending state of its
      own); ``pending_times()`` gives those times. A node whose own state changes outside ``push``
      either tells its scope (``scope.holding.add(node)``) or observes the frontier (an input node:
      its session fills it between runs, and each run steps it with a new frontier).
    * ``observes_frontier``: a node that must see every new frontier even without input (to advance
      a trace's upper and compaction, or record the output frontier) sets it; others are stepped only
      when they hold work.
    * ``pair_columns``: a node that accepts a batch whose records are pairs as two id columns (the
      pairs' components) besides batches of record ids sets it; a producer whose records are pairs
      built from id columns may then hand them over without interning the pairs. ``pair_items``:
      the items of such pairs the node reads (a map reading only ``r[1]`` reads item 1): an input
      whose every consumer takes pair columns interns only the items some consumer reads.
    """

    observes_frontier = False
    pair_columns = False
    pair_items = frozenset((0, 1))
    seen: Antichain | None = None  # the frontier of the node's last step
    _label: str | None = None  # given by `Collection.name`, or the kind and the user function
    given_name: str | None = None  # the name a user gave it (`Collection.name`, `Arranged.name`)
    reads: tuple[Node, ...] = ()  # the arrangements a join or reduction reads (named in its errors)

    def __init__(self, scope: Scope, ports: int = 1, *, name: str = "", first: bool = False) -> None:
        self.scope = scope
        self.name = name or type(self).__name__.lower()
        self.buffers: list[list[Updates]] = [[] for _ in range(ports)]
        self.consumers: list[tuple[Node, int]] = []
        scope.add(self, first=first)

    @property
    def label(self) -> str:
        """What metrics and errors call this node: the name a user gave its collection
        (``Collection.name``), else its kind with its user function's qualified name
        (``map(parse_view)``), else its kind (``name``). Not unique: two ``map(parse_view)`` nodes
        share it (``Dataflow`` numbers the repeats where it lists them)."""
        return self._label or self.name

    @label.setter
    def label(self, value: str) -> None:
        self._label = value

    @property
    def interner(self):
        """The dataflow's interner (values <-> ids)."""
        return self.scope.context.interner

    @property
    def tuning(self):
        """The dataflow's :class:`~ddflow.operators.tuning.EngineConfig`."""
        return self.scope.context.tuning

    def connect(self, consumer: Node, port: int = 0) -> None:
        self.consumers.append((consumer, port))

    def push(self, port: int, updates: Updates) -> None:
        """Buffer non-empty ``updates`` on ``port`` (the node then holds work)."""
        if updates.diffs.shape[0]:
            self.buffers[port].append(updates)
            self.scope.holding.add(self)

    def emit(self, updates: Updates) -> None:
        """Push ``updates`` to every consumer (what ``push`` does, without a call per consumer)."""
        if updates.diffs.shape[0]:
            for node, port in self.consumers:
                node.buffers[port].append(updates)
                scope = node.scope
                if node not in scope.holding:  # (often it is: a membership test is no call)
                    scope.holding.add(node)  # _now_holding without its call
                    if scope.parent is self.scope:
                        self.scope.holding.add(scope.loop)

    def _now_holding(self, node: Node) -> None:
        """``node``, just given updates, holds work; when it is a loop's ingress (its scope is inside
        this node's), so does the loop in this node's scope: its next round must see them, even if the
        loop's pass ran before they came and found its inner scope idle."""
        scope = node.scope
        scope.holding.add(node)
        if scope.parent is self.scope:
            self.scope.holding.add(scope.loop)

    def emit_records(self, out: Updates) -> None:
        """Push a batch of records: pair columns (two data columns) by :meth:`emit_pairs`, record
        ids by :meth:`emit`."""
        if len(out.data) == 2:
            self.emit_pairs(out)
        else:
            self.emit(out)

    def emit_pairs(self, out: Updates, *, spare: bool = False) -> None:
        """Push ``out``, whose records are the pairs of its two id columns, to every consumer: as the
        two columns to those that take them (``pair_columns``), as pair ids to the others, interned
        once for them all (written over ``out``'s second column when ``spare`` and no consumer keeps
        the columns). The pair ids follow the columns' order: a batch of distinct ``(record, time)``
        stays one."""
        if not out.diffs.shape[0]:
            return
        paired = None
        for node, port in self.consumers:
            if node.pair_columns:
                batch = out
            else:
                if paired is None:
                    first, second = out.data
                    interner = self.interner
                    keep = any(n.pair_columns for n, _port in self.consumers)
                    codes = interner.pair_into(first, second) if spare and not keep else interner.pair(first, second)
                    paired = Updates((codes,), out.times, out.diffs)
                batch = paired
            node.buffers[port].append(batch)
            if node not in node.scope.holding:
                self._now_holding(node)

    def take_all(self, port: int = 0, width: int = 1) -> Updates:
        """Remove and return every update buffered on ``port``."""
        parts = self.buffers[port]
        if not parts:
            return Updates.empty(width, self.scope.depth)
        self.buffers[port] = []
        return parts[0] if len(parts) == 1 else concat(parts, width, self.scope.depth)

    def take_complete(self, frontier: Antichain, port: int = 0, width: int = 1) -> Updates:
        """Remove and return the buffered updates at times not beyond ``frontier``."""
        if not self.buffers[port]:
            return Updates.empty(width, self.scope.depth)
        complete, pending = beyond_split(self.take_all(port, width), frontier)
        if len(pending):
            self.buffers[port] = [pending]
        return complete

    def holds_work(self) -> bool:
        """True when the node holds buffered updates (subclasses add their own pending state)."""
        for buf in self.buffers:
            if buf:
                return True
        return False

    def pending_times(self) -> np.ndarray:
        parts = [u.times for buf in self.buffers for u in buf]
        return np.concatenate(parts) if parts else np.empty((0, self.scope.depth), dtype=np.int64)

    def step(self, frontier: Antichain) -> None:
        raise NotImplementedError

    def arrangements(self):
        """``(name, spine)`` pairs of traces this node maintains (for sizes and metrics)."""
        return ()

    def held_ids(self) -> Iterator[np.ndarray]:
        """Every column of record ids this node keeps between steps: its buffered batches and the
        batches of the traces it maintains (``arrangements``). A node that keeps ids anywhere else
        (pending keys, captured updates) must add them: at the end of ``Dataflow.run()`` the ids
        that no node reports are given back, and may then name other records."""
        for buf in self.buffers:
            for u in buf:
                yield from u.data
        for _, spine in self.arrangements():
            for batch in spine.batches():
                yield batch.keys
                yield batch.vals


def at_node(exc: DiffError, node: Node | None) -> DiffError | None:
    """``exc`` raised while stepping ``node``, named with the node and the record's values; None when
    it carries no record, already names its operator, or no node was being stepped (the caller then
    re-raises ``exc`` as it is)."""
    if exc.record_ids is None or exc.operator is not None or node is None:
        return None
    return DiffError(f"{node.label}: {exc} (the record {describe_ids(node, exc.record_ids)})",
                     record_ids=exc.record_ids, time=exc.time, operator=node.label)


def locate_failure(exc: UserFunctionError, node: Node | None) -> None:
    """Name in ``exc`` the name a user gave ``node``, the operator whose function raised it, and
    those of the arrangements it reads, unless a node inside it (in a loop) was named already."""
    if exc.located or node is None:
        return
    exc.located = True
    exc.name = node.given_name
    exc.reading = tuple(dict.fromkeys(  # a self-join reads one arrangement twice
        r.label for r in node.reads if r.given_name is not None or getattr(getattr(r, "source", None), "given_name", None)))
    exc.args = (str(exc),)  # what repr() and another worker's TransportAborted show


def describe_ids(node: Node, ids: tuple[int, ...]) -> str:
    """The values of a record's interned ``ids`` (one per data column) as the node's users know them."""
    try:
        values = [node.interner.value(int(i)) for i in ids]
    except (IndexError, KeyError, ValueError):  # not ids of interned values: name the ids
        return "ids " + ", ".join(map(str, ids))
    return repr(values[0]) if len(values) == 1 else repr(tuple(values))
