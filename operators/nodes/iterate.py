"""Iteration: a loop scope whose times extend the enclosing ones with an iteration counter.

``iterate(body)`` builds ``v = enter(x) + feedback``, ``result = body(v)``, and feeds
``result - enter(x)`` back with the counter advanced by one, so ``v_0 = x`` and ``v_{i+1} = body(v_i)``;
the loop's output (``egress``) is ``result`` with the counter dropped, which accumulates to the fixed
point. Loops nest: an inner loop is a node of its enclosing loop's scope.

Driving a loop for an enclosing frontier ``Φ`` runs *rounds*: round ``r`` steps every inner node in
order with the frontier ``lift(Φ) ∪ {(φ, r + 1) : φ ∈ Φ_prev}`` (``Φ_prev``: the enclosing frontier the loop
last finished) — all outer times of the epoch advance through iteration ``r`` together. Rounds repeat,
skipping empty iterations, until no inner node holds work at a time whose outer part is complete.
As one of several workers, the round is the least any worker has work at, so every worker runs the
same rounds and a loop ends only when no worker has work left.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import IterationLimitError
from ..frontier import Antichain
from ..graph import Node, Scope
from ..kernels.frontier import least_ready
from ..lattice import T_MIN
from ..traces.batch import Updates, by_width, concat, consolidate
from ..transport import IDLE
from .exchange import ballot_box


def lift(frontier: Antichain, counter: int) -> list[tuple[int, ...]]:
    return [(*f, counter) for f in frontier.elements]


class Loop(Node):
    """A node of the enclosing scope that runs an inner scope to its fixed point and emits its egress."""

    observes_frontier = True
    pair_columns = True  # its egress: pairs as two id columns go on so

    def __init__(self, scope: Scope, *, max_iterations: int | None = None) -> None:
        super().__init__(scope, name="iterate")
        self.max_iterations = max_iterations
        self.inner = Scope(scope.context, scope.depth + 1, parent=scope, loop=self)
        self.finished = Antichain([(T_MIN,) * scope.depth])
        self.rounds = 0
        self.round = -1  # the round being run (-1: the step that closes an epoch)

    def step(self, frontier: Antichain) -> None:
        """Run the rounds the enclosing ``frontier`` allows, then the closing pass. With several workers
        the first round is agreed (``worker.least_round``), and so is every later one unless the inner
        scope has an exchange and there is no iteration limit: then a pass runs the round after the
        last, and its exchange's ballots agree whether any worker had work at it (see
        :mod:`ddflow.operators.executor`, which does the same)."""
        inner = self.inner
        worker = self.scope.context.worker
        outer = frontier.array(self.scope.depth)
        rounds = Rounds(self, worker, self.ballot_box if worker is not None else None,
                        lambda: self._next_round(outer), frontier)
        r = rounds.first()
        while r is not None:
            rounds.begin(r)
            round_frontier = Antichain([*lift(frontier, 0), *((*f, r + 1) for f in self.finished.elements)])
            self.round = r
            inner.step(round_frontier)
            r = rounds.after(r)
        self.round = -1
        inner.step(Antichain(lift(frontier, 0)))
        self.finished = frontier
        self.leave()

    @functools.cached_property
    def ballot_box(self):
        """The inner scope's exchange its rounds' ballots ride on (:func:`~.exchange.ballot_box`; read
        once the graph is fixed, at the first step)."""
        return ballot_box(self.inner)

    def leave(self) -> None:
        """Emit the egress buffered by the inner scope, its loop counter dropped, consolidated (pair
        records that came as two id columns go on so)."""
        parts, self.buffers[0] = self.buffers[0], []
        for group in by_width(parts) if parts else ():
            egress = concat(group)
            self.emit_records(consolidate(egress.with_times(np.ascontiguousarray(egress.times[:, :-1]))))

    def _next_round(self, outer: np.ndarray) -> int | None:
        """The least iteration of the work the inner nodes hold at outer times complete for the
        enclosing frontier (``outer``, its array), or ``None``: one compiled pass per holding node."""
        r = None
        for node in self.inner.holding:
            times = node.pending_times()
            if len(times):
                count, least = least_ready(times if times.flags.c_contiguous else np.ascontiguousarray(times),
                                           outer)
                if count and (r is None or least < r):
                    r = least
        return None if r is None else int(r)

    def holds_work(self) -> bool:
        # as one of several workers, stepped in every pass: its rounds are agreed with the others
        return self.scope.context.worker is not None or bool(self.inner.holding) or super().holds_work()

    def pending_times(self) -> np.ndarray:
        times = self.inner.pending_times()
        own = super().pending_times()
        return np.concatenate([times[:, :-1], own[:, :-1]]) if len(own) else times[:, :-1]


def check_limit(loop: Loop, r: int, frontier: Antichain) -> None:
    """:class:`IterationLimitError` when round ``r`` reaches ``loop``'s ``max_iterations``."""
    if r >= loop.max_iterations:
        raise IterationLimitError(
            f"iterate: work remains at iteration {r} of the epoch before {frontier.elements}, at its "
            f"max_iterations={loop.max_iterations}: the loop reaches no fixed point for these inputs "
            "or needs more iterations", iteration=r, limit=loop.max_iterations)


class Rounds:
    """The rounds one step of ``loop`` runs, for either executor: ``first()``, then ``begin(r)``
    before the pass of round ``r`` and ``after(r)`` (the next round, ``None`` at the end) after it.

    Alone, a loop runs the least round its inner nodes hold work at, until none is left
    (``next_round()``). With several workers (``worker``) the first round is agreed
    (``worker.least_round``); so is every later one when the loop has no exchange of its own (``box``
    is ``None``) or an iteration limit. Otherwise each later pass runs the round after the last and
    casts this worker's least round with work on ``box``, whose step in the pass counts every
    worker's ballot: when no worker had work at the round, the pass did nothing, and the loop goes on
    at the agreed round or ends. ``loop.rounds`` counts the passes that had work."""

    def __init__(self, loop: Loop, worker, box, next_round, frontier: Antichain) -> None:
        self.loop, self.worker, self.next_round, self.frontier = loop, worker, next_round, frontier
        self.box = box if loop.max_iterations is None else None
        self.guess = False  # the round is the one after the last (its ballots say whether it had work)

    def first(self) -> int | None:
        r = self.next_round()
        return r if self.worker is None else self.worker.least_round(r)

    def begin(self, r: int) -> None:
        if self.loop.max_iterations is not None:
            check_limit(self.loop, r, self.frontier)
        if self.guess:
            mine = self.next_round()
            self.box.cast(IDLE if mine is None else mine)

    def after(self, r: int) -> int | None:
        box = self.box
        if box is None:
            self.loop.rounds += 1
            return self.first()
        if self.guess and box.agreed != r:  # no worker had work at round r: the pass did nothing
            self.guess = False
            return box.agreed_after(r)
        self.loop.rounds += 1
        self.guess = True
        return r + 1


class Feedback(Node):
    """The loop's back edge: complete updates at iteration ``i`` re-enter the variable at ``i + 1``.
    Pair records may come as two id columns (``pair_columns``): they go on as they came."""

    pair_columns = True

    def step(self, frontier: Antichain) -> None:
        parts = self.buffers[0]
        if parts:  # record ids and pair columns, each kind on its own (one batch: the common case)
            self.buffers[0] = (self._feed(parts, frontier) if not parts[1:] else
                               [kept for group in by_width(parts) for kept in self._feed(group, frontier)])

    def _feed(self, parts: list[Updates], frontier: Antichain) -> list[Updates]:
        """Emit the complete updates of ``parts`` (batches of one width) at the next iteration;
        returns what stays buffered."""
        u = concat(parts, len(parts[0].data), self.scope.depth) if parts[1:] else parts[0]
        late, count = frontier.split(u.times)
        if count == 0:
            kept = []
        elif count == late.shape[0]:  # nothing complete: the buffer stays (as one batch)
            return [u]
        else:
            kept = [u.take(late)]
            u = u.take(~late)
        u = consolidate(u)
        if u.diffs.shape[0]:
            step = self._step
            if step is None:  # (0, ..., 0, 1): the next iteration, added to each time (a ufunc, no call)
                step = self._step = np.eye(1, u.times.shape[1], u.times.shape[1] - 1, dtype=np.int64)
            out = Updates(u.data, u.times + step, u.diffs)
            if len(out.data) == 1:  # (emit_records without its call)
                self.emit(out)
            else:
                self.emit_pairs(out)
        return kept

    _step: np.ndarray | None = None
