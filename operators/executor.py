"""Executors: what runs an epoch of a dataflow.

Two executors compute the same thing, and :class:`~ddflow.operators.tuning.EngineConfig`'s
``executor`` picks one per dataflow:

* ``"nodes"``, the reference: :meth:`Scope.step <ddflow.operators.graph.Scope.step>` walks each
  scope's node objects, and each loop node runs its own rounds (:mod:`ddflow.operators.nodes.iterate`).
* ``"plan"``, the default: :class:`PlanExecutor` steps through the dataflow's :class:`~ddflow.operators.plan.Plan`
  (lowered at the first run). It runs the scopes from the plan's tables, runs every loop's rounds
  itself, and inside a loop's rounds skips the nodes that only observe the frontier and hold no
  work (an arrangement advancing its upper, a join or reduction moving its compaction), and lets a
  join that works leave its compaction (``Context.in_round``): they see the frontier in the loop's
  closing pass, which is all a frontier they were not stepped with would have told them (an upper
  may stay behind until the next insert, which covers the times between; compaction is never
  required, only allowed).

A ``concat`` is never stepped: the executor routes its producers' output straight to its consumers
(each producer's consumer list names the concat's consumers instead, once, when the executor is
made), which is the union a concat computes, one step per pass sooner or at the same pass (a
concat's consumers may act on an update as soon as it is pushed: every node takes only the times
the frontier has completed).

The pass reads a node's buffers itself where they are all the work it holds (the node keeps
``Node.holds_work``), and the next round is found from the holding nodes' buffered batches (and a
reduction's times to revisit) batch by batch, without asking each node for its pending times.

Where the executor stops and resumes: every operator step is still the node's own Python
``step`` (the boundary today is the whole node: a step of a user function runs it once per distinct
record, memoised as before). An exchange (:mod:`ddflow.operators.nodes.exchange`) is stepped in
every pass of its scope, round or not, so that every worker's steps pair up through the
:class:`~ddflow.operators.transport.Transport`: the executor hands it the round's frontier, the
exchange sends and receives through the transport, and the executor resumes with what it emitted.
Loop rounds are agreed between workers exactly as the reference does: a loop's first round by
``worker.least_round``; where the loop's scope has an exchange of its own (:func:`ballot_box`) and no
iteration limit, each later pass runs the round after the last, and the ballots its exchange step
carries (each worker's least round with work before the pass) say whether any worker had work at
it; if none had, the pass did nothing anywhere, and the next one runs the round the ballots agreed,
or the loop ends. An agreement per round is saved: the exchange step is made anyway.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .errors import DiffError, UserFunctionError
from .frontier import Antichain
from .graph import Node, at_node, locate_failure
from .kernels.frontier import least_ready
from .nodes.exchange import ballot_box
from .nodes.iterate import Rounds, check_limit
from .nodes.reduce.node import Reduce
from .plan import KIND, Plan

_LOOP = KIND["loop"]
_EXCHANGE = KIND["exchange"]
_ARRANGE = KIND["arrange"]
_CONCAT = KIND["concat"]
_BUFFERED = Node.pending_times  # the pending times of a node that holds only buffered batches
_IN_BUFFERS, _IN_BUFFERS_AND_AT = 1, 2  # where a node's pending times are (see _next_round)
_REDUCE_PORTS = 3  # _buffered_ports of a reduction: its one buffer and its times to revisit hold its work
_QUIET = frozenset((KIND["arrange"], KIND["join"], KIND["reduce"]))  # idle observers a round may skip
# linear nodes: a step takes every buffered update, so it leaves the node without work
_LINEAR = frozenset(KIND[k] for k in ("concat", "negate", "map", "filter", "flat_map", "inspect", "enter"))


class PlanExecutor:
    """Runs epochs of one dataflow over its plan (see the module docstring)."""

    def __init__(self, plan: Plan, worker: Any = None) -> None:
        self.plan = plan
        self.worker = worker
        kinds = plan.kind.tolist()
        observes = plan.observes.tolist()
        # per scope: (node, kind code, may be skipped in a round when idle, observes the frontier,
        # is linear, its ports when only its buffers hold work (Node.holds_work: the pass reads them
        # itself) else 0)
        self._rows = []
        for s in range(len(plan.scopes)):
            first, count = int(plan.scope_first[s]), int(plan.scope_count[s])
            self._rows.append([(plan.nodes[i], kinds[i], kinds[i] in _QUIET, bool(observes[i]), kinds[i] in _LINEAR,
                                _buffered_ports(plan.nodes[i]))
                               for i in range(first, first + count)])
        self._inner = {i: int(plan.loop[i]) for i in range(len(plan.nodes)) if kinds[i] == _LOOP}
        # per loop scope: the exchange its rounds after the first may be agreed on (`Rounds`), or None
        self._boxes = {s: ballot_box(plan.scopes[s]) if worker is not None else None for s in self._inner.values()}
        self._pending = {node: _pending_where(node) for node in plan.nodes}
        for i, node in enumerate(plan.nodes):
            if kinds[i] == _ARRANGE:  # small steps seal in one kernel call
                node.fused = True
        _route_around(frozenset(id(plan.nodes[i]) for i in range(len(kinds)) if kinds[i] == _CONCAT), plan.nodes)
        self.rounds = 0  # loop rounds run, all loops together

    def run(self, frontier: Antichain) -> None:
        """Every pass of the outer scope the input ``frontier`` allows (the caller agreed it with the
        other workers, if any)."""
        worker = self.worker
        root = self.plan.scopes[0]
        while True:
            self._pass(0, frontier, True)
            more = root.complete_work(frontier)
            if worker is not None:
                more = worker.any(more)
            if not more:
                return

    def _pass(self, s: int, frontier: Antichain, closing: bool) -> None:
        """One pass over scope ``s``'s nodes: those holding work, and the frontier's observers that
        have not seen it (in a loop's round, ``closing`` false, only those that may not wait)."""
        scope = self.plan.scopes[s]
        holding = scope.holding
        node = None
        try:
            for node, kind, quiet, observes, linear, ports in self._rows[s]:
                if node in holding:
                    if kind == _LOOP:
                        self._loop(node, frontier)
                    elif kind != _ARRANGE or not node._step_fused(frontier):  # (a fused arrangement's step
                        node.step(frontier)  # of buffered updates, without the call of Arrange.step)
                    node.seen = frontier
                    if linear:
                        holding.discard(node)
                    elif not (node.buffers[0] if ports == 1 else (node.buffers[0] or node.buffers[1]) if ports == 2
                              else (node.buffers[0] or node.pending_at.shape[0]) if ports == _REDUCE_PORTS
                              else node.holds_work()):
                        holding.discard(node)
                elif observes and node.seen is not frontier and (closing or not quiet):
                    if kind == _LOOP:
                        self._loop(node, frontier)
                    else:
                        node.step(frontier)
                    node.seen = frontier
                    if (node.buffers[0] if ports == 1 else (node.buffers[0] or node.buffers[1]) if ports == 2
                            else (node.buffers[0] or node.pending_at.shape[0]) if ports == _REDUCE_PORTS
                            else node.holds_work()):
                        holding.add(node)
        except DiffError as exc:
            located = at_node(exc, node)
            if located is None:
                raise
            raise located from exc
        except UserFunctionError as exc:  # the node inside a loop first: its own pass names it
            locate_failure(exc, node)
            raise

    def _loop(self, loop, frontier: Antichain) -> None:
        """The loop's rounds for the enclosing ``frontier``, then its closing pass and egress (what
        :meth:`Loop.step <ddflow.operators.nodes.iterate.Loop.step>` does, over the plan)."""
        s = self._inner[self.plan.row(loop)]
        inner = self.plan.scopes[s]
        worker = self.worker
        context = inner.context
        depth = loop.scope.depth
        outer = frontier.array(depth)
        base = [(*f, 0) for f in frontier.elements]
        round_frontier = _round_frontiers(base, loop.finished._elements)
        rounds = None if worker is None else Rounds(  # (alone: no object and no calls of its own per round)
            loop, worker, self._boxes[s], lambda: _next_round(inner.holding, outer, self._pending), frontier)
        r = _next_round(inner.holding, outer, self._pending) if rounds is None else rounds.first()
        while r is not None:
            if rounds is not None:
                rounds.begin(r)
            elif loop.max_iterations is not None:
                check_limit(loop, r, frontier)
            loop.round = r
            outside, context.in_round = context.in_round, True
            try:
                self._pass(s, round_frontier(r), False)
            finally:
                context.in_round = outside
            before = loop.rounds
            if rounds is None:
                loop.rounds += 1
                r = _next_round(inner.holding, outer, self._pending)
            else:
                r = rounds.after(r)  # (counts the round when it had work)
            self.rounds += loop.rounds - before
        loop.round = -1
        outside, context.in_round = context.in_round, False
        try:
            self._pass(s, Antichain(base), True)
        finally:
            context.in_round = outside
        loop.finished = frontier
        loop.leave()


def _pending_where(node: Node) -> int:
    """Where ``node``'s pending times are, for :func:`_next_round`."""
    if type(node).pending_times is _BUFFERED:
        return _IN_BUFFERS
    if type(node).pending_times is Reduce.pending_times:
        return _IN_BUFFERS_AND_AT
    return 0


def _buffered_ports(node: Node) -> int:
    """The ports of ``node`` when its work is only what its buffers hold (its class keeps
    ``Node.holds_work``) and it has one or two; ``_REDUCE_PORTS`` for a reduction (its buffer and its
    times to revisit, ``Reduce.holds_work``); else 0 (the pass asks ``holds_work()``)."""
    if type(node).holds_work is Node.holds_work and len(node.buffers) in (1, 2):
        return len(node.buffers)
    if type(node).holds_work is Reduce.holds_work:
        return _REDUCE_PORTS
    return 0


def _route_around(concats: frozenset[int], nodes) -> None:
    """Make every node among ``nodes`` whose output goes to a concat (``concats``: their ids) push to
    the concat's consumers instead, through chains of concats, a port as many times as it is reached
    (``concat(x, x)`` is ``x`` twice)."""

    def through(consumers):
        routed = []
        for consumer, port in consumers:
            if id(consumer) in concats:
                routed.extend(through(consumer.consumers))
            else:
                routed.append((consumer, port))
        return routed

    rerouted = {id(node): through(node.consumers) for node in nodes
                if any(id(c) in concats for c, _ in node.consumers)}
    for node in nodes:
        if id(node) in rerouted:
            node.consumers = rerouted[id(node)]


def _round_frontiers(base: list[tuple[int, ...]], finished: list[tuple[int, ...]]):
    """``frontier(r)``: round ``r``'s frontier, the enclosing frontier's times at iteration 0
    (``base``) and the last finished enclosing frontier's (``finished``) at iteration ``r + 1``, a new
    object for each call. With one time each (the common case) the antichain is made directly: two
    times, unless the first is ``<=`` the second (then the first alone, whatever ``r``)."""
    if len(base) == 1 and len(finished) == 1:
        b, f = base[0], finished[0]
        if all(map(operator.le, b[:-1], f)):

            def frontier(r: int) -> Antichain:
                made = Antichain.__new__(Antichain)
                made._elements, made._array, made._one, made._hash = [b], None, None, None
                return made
        else:

            def frontier(r: int) -> Antichain:
                made = Antichain.__new__(Antichain)
                made._elements, made._array, made._one, made._hash = [b, (*f, r + 1)], None, None, None
                return made

        return frontier
    return lambda r: Antichain([*base, *((*f, r + 1) for f in finished)])


def _next_round(holding, outer: np.ndarray, pending: dict) -> int | None:
    """The least iteration of the work ``holding`` (a loop's inner nodes) holds at outer times
    complete for ``outer`` (the enclosing frontier's array), or ``None``. ``pending[node]`` says where
    a node's pending times are: ``_IN_BUFFERS`` (its buffered batches, read batch by batch, no
    concatenation of their times), ``_IN_BUFFERS_AND_AT`` (those and ``node.pending_at``, a
    reduction's times to revisit), else ``node.pending_times()``."""
    r = None
    for node in holding:
        where = pending[node]
        if where:
            for buf in node.buffers:
                for u in buf:
                    times = u.times
                    if times.shape[0]:
                        count, least = least_ready(
                            times if times.flags.c_contiguous else np.ascontiguousarray(times), outer)
                        if count and (r is None or least < r):
                            r = least
            if where == _IN_BUFFERS_AND_AT:
                times = node.pending_at
                if times.shape[0]:
                    count, least = least_ready(times if times.flags.c_contiguous else np.ascontiguousarray(times),
                                               outer)
                    if count and (r is None or least < r):
                        r = least
        else:
            times = node.pending_times()
            if times.shape[0]:
                count, least = least_ready(times if times.flags.c_contiguous else np.ascontiguousarray(times), outer)
                if count and (r is None or least < r):
                    r = least
    return None if r is None else int(r)
