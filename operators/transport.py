"""Transports: how the workers of one dataflow exchange updates and agree on progress.

``W`` workers run the same graph, each in its own :class:`~ddflow.operators.dataflow.Dataflow`.
They meet at two kinds of points, always in the same order on every worker (the graph and the
round structure are the same everywhere, and every decision that could differ is agreed first):

* **Exchanges.** Step ``seq`` of exchange point ``channel`` sends each update to the worker that
  owns its key: zero or more :class:`ExchangeBatch` messages per destination, then exactly one
  :class:`ExchangeMarker` per destination with the number of updates sent (zero included). A
  receiver holds all of a step once it has a marker from every other worker and as many updates
  as the markers count. Batches and markers name the epoch ``[lower, upper)`` the sender is working
  on and the loop rounds it is in, the same facts a result topic's messages carry, so a transport
  that loses or repeats messages (a Kafka topic per exchange point, ``W`` partitions) can tell them
  apart; records travel as values (each worker interns its own ids).
* **Agreements.** ``gather(worker, seq, value)`` hands every worker the values all workers gave for
  agreement ``seq``: the meet of their input frontiers (the common clock), the least loop round any
  worker has work at, whether any worker has work left.
* **Ballots.** A marker may also carry its sender's *ballot*: the least loop round it has work at
  (:data:`IDLE`: none; :data:`ABSTAIN`, the default: no ballot). After ``receive``,
  ``ballots(worker)`` gives the ballots of that step's markers, so that a loop's rounds after the
  first are agreed on the exchange step every round makes anyway, not in an agreement of their own
  (:mod:`ddflow.operators.executor`).

Where an executor meets the transport (:mod:`ddflow.operators.executor`): an epoch's ``run()``
first agrees the common frontier; then, in every pass of a scope (every loop round, and each
loop's closing pass), the executor steps each exchange node in graph order, the exchange sends its
complete updates and blocks until it holds every other worker's share of that step, and the
executor resumes with what the exchange emitted; before its first round a loop agrees the least round
any worker has work at (and the later rounds by ballots, where the loop has an exchange of its own),
and after each pass of the outer scope whether any worker has work left.
Both executors make the same exchange steps and agreements in the same order, so a transport
sees no difference between them.

:class:`LocalTransport` runs the workers as threads of one process (the engine's tests and the
multi-worker runner, :mod:`ddflow.operators.workers`). A worker that fails aborts the transport, so
the others stop waiting and raise :class:`TransportAborted`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .errors import DataflowError, TransportAborted

__all__ = ["ABSTAIN", "IDLE", "ExchangeBatch", "ExchangeMarker", "LocalTransport", "Transport", "TransportAborted"]

ABSTAIN = -2  # a marker's ballot: none
IDLE = -1  # a marker's ballot: the sender has no work in the loop


@dataclass(frozen=True)
class ExchangeBatch:
    """Updates of one exchange step from ``source`` to ``dest``: ``records`` (a list of values, or
    int columns: an int64 array of ints or an ``(n, 2)`` array of pairs of ints), ``times``
    (``(n, depth)`` int64, each update's own time) and ``diffs``. ``lower``/``upper``: the epoch
    (the sender's previous and current frontier, ``None`` for an empty one); ``rounds``: the loop
    round of each enclosing loop (``-1``: the step that closes a loop's epoch)."""

    channel: int
    seq: int
    source: int
    dest: int
    lower: int | None
    upper: int | None
    rounds: tuple[int, ...]
    records: list | np.ndarray
    times: np.ndarray
    diffs: np.ndarray


@dataclass(frozen=True)
class ExchangeMarker:
    """The end of one exchange step from ``source`` to ``dest``: ``count`` updates were sent;
    ``ballot``: the sender's ballot (see the module), :data:`ABSTAIN` for none."""

    channel: int
    seq: int
    source: int
    dest: int
    lower: int | None
    upper: int | None
    rounds: tuple[int, ...]
    count: int
    ballot: int = ABSTAIN


class Transport(Protocol):
    """What workers need from the medium between them (see the module's description).

    A worker calls ``send`` and ``mark`` for every other worker, then ``receive``; each worker
    calls ``gather`` with the same ``seq`` sequence. Implementations must deliver every batch sent
    before its marker, and may assume no worker sends twice for one ``(channel, seq)``."""

    workers: int

    def send(self, batch: ExchangeBatch) -> None:
        """Deliver ``batch`` to ``batch.dest`` (for the step its channel and seq name)."""
        ...

    def mark(self, marker: ExchangeMarker) -> None:
        """Deliver the end of a step to ``marker.dest``, after every batch of that step."""
        ...

    def receive(self, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
        """Every batch sent to ``worker`` for step ``seq`` of ``channel``, once all are there."""
        ...

    def ballots(self, worker: int) -> list[int]:
        """The ballots of the markers of the step ``worker`` received last, in their senders' order."""
        ...

    def gather(self, worker: int, seq: int, value: Any) -> list[Any]:
        """The values every worker gave for agreement ``seq``, in worker order."""
        ...

    def abort(self, error: BaseException) -> None:
        """Wake every waiting worker with :class:`TransportAborted`."""
        ...


class LocalTransport:
    """Workers as threads of one process: mailboxes under one condition variable."""

    def __init__(self, workers: int) -> None:
        if type(workers) is not int or workers < 1:
            raise DataflowError(f"a transport needs a positive int of workers, got {workers!r}")
        self.workers = workers
        self._cond = threading.Condition()
        self._boxes: dict[tuple[int, int, int], tuple[list[ExchangeBatch], dict[int, ExchangeMarker]]] = {}
        self._votes: dict[int, list] = {}
        self._taken: dict[int, int] = {}
        self._ballots: dict[int, list[int]] = {}  # per worker: its last step's
        self._error: BaseException | None = None
        self.batches = 0  # batches delivered so far (tests and figures)
        self.updates = 0  # updates delivered so far

    def _box(self, dest: int, channel: int, seq: int):
        key = (dest, channel, seq)
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = ([], {})
        return box

    def send(self, batch: ExchangeBatch) -> None:
        with self._cond:
            self._box(batch.dest, batch.channel, batch.seq)[0].append(batch)

    def mark(self, marker: ExchangeMarker) -> None:
        with self._cond:
            markers = self._box(marker.dest, marker.channel, marker.seq)[1]
            if marker.source in markers:
                raise DataflowError(f"exchange {marker.channel} step {marker.seq}: worker {marker.source} marked "
                                    f"worker {marker.dest} twice")
            markers[marker.source] = marker
            self._cond.notify_all()

    def receive(self, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
        others = self.workers - 1
        with self._cond:
            box = self._box(worker, channel, seq)
            while len(box[1]) < others:
                self._wait()
            del self._boxes[(worker, channel, seq)]
        batches, markers = box
        sent = {m.source: m.count for m in markers.values()}
        got: dict[int, int] = {}
        for b in batches:
            got[b.source] = got.get(b.source, 0) + len(b.diffs)
        if any(got.get(source, 0) != count for source, count in sent.items()):
            raise DataflowError(f"exchange {channel} step {seq} at worker {worker}: markers count {sent}, "
                                f"batches hold {got}")
        facts = {(m.lower, m.upper, m.rounds) for m in markers.values()}
        if len(facts) > 1:
            raise DataflowError(f"exchange {channel} step {seq}: workers are at different epochs or rounds: "
                                f"{sorted(facts, key=repr)}")
        with self._cond:
            self.batches += len(batches)
            self.updates += sum(got.values())
        self._ballots[worker] = [markers[source].ballot for source in sorted(markers)]
        return sorted(batches, key=lambda b: b.source)

    def ballots(self, worker: int) -> list[int]:
        return self._ballots.get(worker, [])

    def gather(self, worker: int, seq: int, value: Any) -> list[Any]:
        with self._cond:
            votes = self._votes.get(seq)
            if votes is None:
                votes = self._votes[seq] = [None] * self.workers
                self._taken[seq] = 0
            votes[worker] = (value,)
            self._cond.notify_all()
            while any(v is None for v in votes):
                self._wait()
            self._taken[seq] += 1
            if self._taken[seq] == self.workers:
                del self._votes[seq], self._taken[seq]
        return [v[0] for v in votes]

    def abort(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def _wait(self) -> None:
        if self._error is not None:
            raise TransportAborted(f"another worker failed: {self._error!r}") from None
        self._cond.wait()
        if self._error is not None:
            raise TransportAborted(f"another worker failed: {self._error!r}") from None
