"""Exchange: routes every update to the worker that owns its key, before an arrangement.

With ``W`` workers, worker ``i`` owns the keys whose stable hash
(:func:`ddflow.operators.partition.key_hash`) is ``i`` modulo ``W``: a by-key arrangement routes
``(key, val)`` by ``key``, a by-self one routes a record by the record itself, so a join's or a
reduction's inputs meet on one worker whatever worker read them. Each step of an exchange is a
step of every worker's copy at once (:mod:`ddflow.operators.transport`): the node sends the updates
it holds at complete times (not beyond the step's frontier, so a batch's times lie inside the epoch
it names; later ones wait for their step) and passes on its own share plus what the others sent it,
every update with its own time. It is stepped in every pass of its scope on every worker, work or
not, so the workers' steps pair up.

A by-self exchange may instead be ``keyed`` (set while the graph is built, see
:mod:`ddflow.operators.placement`): it routes a ``(key, val)`` record by its key, as a by-key
exchange does, and any other record by itself; equal records still meet, and a distinct's output
then lies where a by-key arrangement of it would put it.

The first exchange of a loop's scope (:func:`ballot_box`) also carries the loop's ballots: given
one (``ballot``, set by the executor before a pass), its markers hold it, and after the step
``agreed`` is the least round any worker has work at by the ballots (``None``: no worker has).
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import DataflowError
from ..frontier import Antichain
from ..graph import Node, Scope
from ..traces.batch import Updates, concat
from ..transport import ABSTAIN, IDLE, ExchangeBatch, ExchangeMarker


class Exchange(Node):
    """Sends each update to its key's owner and emits the updates this worker owns."""

    observes_frontier = True  # stepped in the first pass too, before anything reached it

    def __init__(self, scope: Scope, *, by_self: bool, arrangement: str) -> None:
        super().__init__(scope, name=f"exchange({arrangement})")
        worker = scope.context.worker
        if worker is None:
            raise ValueError("an exchange belongs to a dataflow run by several workers")
        self.worker = worker
        self.by_self = by_self
        self.keyed = False  # a by-self exchange routing pairs by their key (see the module)
        self.arrangement = arrangement
        self.channel = worker.new_channel()
        self.seq = 0  # steps so far: the same on every worker
        self.sent = 0  # updates sent to other workers
        self.received = 0  # updates received from other workers
        self.wait_seconds = 0.0  # time spent waiting for the other workers' steps
        self.ballot = ABSTAIN  # this worker's ballot for the next step (see the module)
        self.agreed: int | None = None  # what the last step's ballots agreed

    def holds_work(self) -> bool:
        return True  # stepped in every pass: the other workers' copies wait for this one

    def step(self, frontier: Antichain) -> None:
        u = self.take_complete(frontier)
        worker, transport = self.worker, self.worker.transport
        seq = self.seq
        self.seq += 1
        ballot, self.ballot = self.ballot, ABSTAIN
        lower, upper = worker.epoch
        rounds = self._rounds()
        me, count = worker.index, worker.count
        if len(u):
            owners = self._owners(u.data[0], count)
            for dest in range(count):
                if dest == me:
                    continue
                sel = np.flatnonzero(owners == dest)
                if len(sel):
                    part = u.take(sel)
                    records = self._records(part.data[0])
                    transport.send(ExchangeBatch(self.channel, seq, me, dest, lower, upper, rounds, records,
                                                 part.times, part.diffs))
                    self.sent += len(sel)
                transport.mark(ExchangeMarker(self.channel, seq, me, dest, lower, upper, rounds, len(sel), ballot))
            mine = owners == me
            parts = [u if mine.all() else u.take(mine)]
        else:  # nothing to send: an empty marker to every other worker
            for dest in range(count):
                if dest != me:
                    transport.mark(ExchangeMarker(self.channel, seq, me, dest, lower, upper, rounds, 0, ballot))
            parts = []
        started = time.perf_counter()
        batches = transport.receive(me, self.channel, seq)
        waited = time.perf_counter() - started
        self.wait_seconds += waited
        worker.waits.add(waited)
        if ballot != ABSTAIN:
            self._count(ballot, transport.ballots(me), seq)
        for batch in batches:
            records = batch.records
            ids = self.interner.ids_of_columns(records) if isinstance(records, np.ndarray) else self.interner.ids(records)
            parts.append(Updates((ids,), batch.times, batch.diffs))
            self.received += len(batch.diffs)
        if parts:
            out = concat(parts, 1, self.scope.depth)  # one part is passed on as it is
            if len(out):
                self.emit(out)

    def cast(self, ballot: int) -> None:
        """Carry ``ballot`` (this worker's least round with work, or ``IDLE``) in the next step."""
        self.ballot, self.agreed = ballot, ABSTAIN

    def agreed_after(self, guessed: int) -> int | None:
        """What the ballots of a pass at round ``guessed`` agreed, when it is not ``guessed`` (no worker
        had work at it): the next round with work, or ``None``. Never an earlier round: a pass leaves
        no work at its round or before, its scope's nodes running in the order updates flow within a
        round; a step that counted no ballot is an error too."""
        agreed = self.agreed
        if agreed == ABSTAIN:
            raise DataflowError(f"exchange {self.channel}: the pass at round {guessed} made no step with a ballot")
        if agreed is not None and agreed < guessed:
            raise DataflowError(f"exchange {self.channel}: ballots agreed round {agreed} after a pass at round {guessed}")
        return agreed

    def _count(self, mine: int, theirs: list[int], seq: int) -> None:
        """``agreed``: the least round of the ballots (``None`` when every worker is idle)."""
        if ABSTAIN in theirs:
            raise DataflowError(f"exchange {self.channel} step {seq}: some workers cast no ballot ({theirs}) "
                                f"where worker {self.worker.index} cast one: they are in different loop rounds")
        rounds = [b for b in (mine, *theirs) if b != IDLE]
        self.agreed = min(rounds) if rounds else None

    def _records(self, ids: np.ndarray) -> list | np.ndarray:
        """The records of ``ids`` as they travel: int columns when they are ints or pairs of ints
        (no Python object per record), else a list of values."""
        columns = self.interner.int_columns(ids)
        return self.interner.value_list(ids) if columns is None else columns

    def _owners(self, ids: np.ndarray, count: int) -> np.ndarray:
        if not self.by_self:
            keys = self.interner.split(ids, self.arrangement)[0]
        else:
            keys = self.interner.keys_or_records(ids) if self.keyed else ids
        return self.interner.owners(keys, count)

    def _rounds(self) -> tuple[int, ...]:
        rounds = []
        scope = self.scope
        while scope.loop is not None:
            rounds.append(scope.loop.round)
            scope = scope.parent
        return tuple(reversed(rounds))


def ballot_box(scope: Scope) -> Exchange | None:
    """The exchange of ``scope`` (a loop's inner scope) that carries its rounds' ballots: its first
    own exchange, stepped in every pass; ``None`` when it has none (the rounds are agreed apart)."""
    for node in scope.nodes:
        if isinstance(node, Exchange):
            return node
    return None
