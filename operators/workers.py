"""Several workers sharing one dataflow by key.

``Workers(W, build)`` makes ``W`` :class:`~ddflow.operators.dataflow.Dataflow` objects and calls
``build(df)`` on each, so every worker holds the same graph; what ``build`` returns (input
sessions, captures) is kept per worker in ``outputs``. Worker ``i`` owns the keys whose stable hash
is ``i`` modulo ``W`` (:func:`ddflow.operators.partition.key_hash`): before each arrangement an
exchange (:mod:`ddflow.operators.nodes.exchange`) routes every update to its key's owner, so joins
and reductions see whole keys wherever the updates entered.

Each worker's ``run()`` works at the meet of all workers' input frontiers (a common clock: no worker
completes a time another may still send updates at), loops advance round by round on every worker
together, and a round ends a loop only when no worker has work left. Every update keeps its own
time. The workers meet through a :class:`~ddflow.operators.transport.Transport`; ``Workers.run()``
runs them as threads of this process over a :class:`~ddflow.operators.transport.LocalTransport`.

One worker of several processes is ``worker_dataflow(index, count, transport)``, a Dataflow the
caller builds, feeds and runs like any other (a daemon worker does this, over the workers' mesh).

Feeding: a worker's own input sessions take updates like a single dataflow's (a daemon worker reads
its share of the input partitions); ``Workers.input(name)`` gives one session that spreads updates
over the workers and advances every worker's session together. The output is the union of the
workers' captures: ``Workers.capture(pick)`` merges them (``pick(outputs)`` selects one capture of a
worker's ``outputs``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from .capture import Capture
from .tuning import EngineConfig
from .dataflow import Dataflow
from .errors import DataflowError, GraphError
from .frontier import Antichain
from .input import InputSession, RecordColumns
from .transport import LocalTransport, Transport, TransportAborted

__all__ = ["MergedCapture", "SpreadInput", "StepWaits", "Worker", "Workers", "worker_dataflow"]

T = TypeVar("T")


class StepWaits:
    """How long a worker's latest exchange steps waited for the others: the last ``size`` waits (in
    seconds, every exchange point's steps together), kept for their percentiles."""

    def __init__(self, size: int = 65_536) -> None:
        self._waits = np.zeros(size)
        self.count = 0  # steps recorded so far (the latest ``size`` are kept)

    def add(self, seconds: float) -> None:
        self._waits[self.count % len(self._waits)] = seconds
        self.count += 1

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) of the kept waits, in seconds; None before the first."""
        kept = min(self.count, len(self._waits))
        return float(np.percentile(self._waits[:kept], q)) if kept else None


class Worker:
    """One worker's part in a multi-worker dataflow: its index among ``count``, the transport, and
    the agreements its dataflow's scheduler makes with the others (see ``Dataflow.run`` and loops);
    ``waits``: its exchange steps' waits (`StepWaits`)."""

    def __init__(self, index: int, count: int, transport: Transport) -> None:
        self.index, self.count, self.transport = index, count, transport
        self.waits = StepWaits()
        self.epoch: tuple[int | None, int | None] = (None, None)  # [lower, upper) being worked on
        self._channels = 0
        self._agreements = 0

    def new_channel(self) -> int:
        """A number for a new exchange point (graph order: the same on every worker)."""
        self._channels += 1
        return self._channels - 1

    def _gather(self, value: Any) -> list[Any]:
        seq = self._agreements
        self._agreements += 1
        return self.transport.gather(self.index, seq, value)

    @property
    def agreements(self) -> int:
        """The number of agreements made so far: the next one's ``seq``."""
        return self._agreements

    def agree(self, value: Any) -> list[Any]:
        """The values every worker gives for the next agreement, in worker order (a caller outside
        ``run()``, such as a daemon agreeing on epoch boundaries, must make every worker call it as
        often and between the same ``run()`` calls)."""
        return self._gather(value)

    def common_frontier(self, frontier: Antichain) -> Antichain:
        """The meet of every worker's input frontier (empty once every input everywhere is closed);
        records the epoch ``[previous, this)`` that exchanges name."""
        times = [tuple(t) for f in self._gather([list(t) for t in frontier.elements]) for t in f]
        common = Antichain([min(times)]) if times else Antichain()
        upper = common.elements[0][0] if times else None
        self.epoch = (self.epoch[1], upper)
        return common

    def least_round(self, round_: int | None) -> int | None:
        """The least loop round any worker has work at (``None``: no worker has)."""
        rounds = [r for r in self._gather(round_) if r is not None]
        return min(rounds) if rounds else None

    def any(self, flag: bool) -> bool:
        """Whether any worker says ``flag``."""
        return any(self._gather(bool(flag)))


def worker_dataflow(index: int, count: int, transport: Transport, *, config: EngineConfig | None = None) -> Dataflow:
    """A Dataflow that is worker ``index`` of ``count`` (the others in other processes or threads,
    reached through ``transport``): build the same graph on it as every other worker does, feed it
    its share of the inputs and call ``run()`` as often as the others do, each call being one step of
    the common clock."""
    if type(count) is not int or count < 1 or type(index) is not int or not 0 <= index < count:
        raise GraphError(f"worker {index!r} of {count!r}: expected an index below a positive count")
    if transport.workers != count:
        raise GraphError(f"the transport connects {transport.workers} workers, not {count}")
    df = Dataflow(config=config)
    df.worker = Worker(index, count, transport)
    return df


class Workers(Generic[T]):
    """``count`` workers, each a Dataflow built by ``build``, run together in this process.

    ``transport``: one transport all workers share (default a new :class:`LocalTransport`), or one
    per worker (each worker's end of a transport between processes, such as the daemon's mesh)."""

    def __init__(self, count: int, build: Callable[[Dataflow], T], *, config: EngineConfig | None = None,
                 transport: Transport | Sequence[Transport] | None = None) -> None:
        if type(count) is not int or count < 1:
            raise GraphError(f"Workers needs a positive int count, got {count!r}")
        transport = LocalTransport(count) if transport is None else transport
        ends = list(transport) if isinstance(transport, Sequence) else [transport] * count
        if len(ends) != count or any(t.workers != count for t in ends):
            raise GraphError(f"the transport must connect {count} workers (one end each, or one shared)")
        self.transport = ends[0]
        self.transports = ends
        self.count = count
        self.dataflows: list[Dataflow] = []
        self.outputs: list[T] = []
        for i in range(count):
            df = worker_dataflow(i, count, ends[i], config=config)
            self.dataflows.append(df)
            self.outputs.append(build(df))

    def input(self, name: str) -> SpreadInput:
        """One session over every worker's input ``name`` (see :class:`SpreadInput`)."""
        return SpreadInput([df.inputs[name] for df in self.dataflows])

    def capture(self, pick: Callable[[T], Capture]) -> MergedCapture:
        """The union of the capture ``pick(outputs)`` of every worker."""
        return MergedCapture([pick(out) for out in self.outputs])

    def run(self) -> None:
        """Run every worker's dataflow until it has done all the work the common frontier allows.
        The first error of any worker is raised here (the others stop at their next exchange)."""
        if self.count == 1:
            self.dataflows[0].run()
            return
        errors: list[tuple[int, BaseException]] = []

        def work(i: int) -> None:
            try:
                self.dataflows[i].run()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                errors.append((i, exc))
                for t in {id(t): t for t in self.transports}.values():
                    t.abort(exc)

        threads = [threading.Thread(target=work, args=(i,), name=f"ddflow-worker-{i}") for i in range(self.count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            first = [e for e in errors if not isinstance(e[1], TransportAborted)] or errors
            raise first[0][1]


class SpreadInput:
    """One input session over the same input of every worker: update ``k`` goes to worker
    ``k % W`` (any worker may take any update: exchanges move it to its owner), and ``advance_to``
    and ``close`` apply to every worker's session."""

    def __init__(self, sessions: Sequence[InputSession]) -> None:
        self.sessions = list(sessions)
        self.name = self.sessions[0].name
        self._next = 0

    @property
    def time(self) -> int | None:
        """The input frontier every worker's session is at (``None`` once closed)."""
        return self.sessions[0].time

    @property
    def frontier(self) -> Antichain:
        """The input frontier as an antichain (empty once closed)."""
        return self.sessions[0].frontier

    def _session(self) -> InputSession:
        s = self.sessions[self._next % len(self.sessions)]
        self._next += 1
        return s

    def insert(self, record: Hashable, time: int) -> None:
        """Add one copy of ``record`` at ``time``, through the next worker's session."""
        self._session().insert(record, time)

    def remove(self, record: Hashable, time: int) -> None:
        """Remove one copy of ``record`` at ``time``, through the next worker's session."""
        self._session().remove(record, time)

    def update(self, record: Hashable, time: int, diff: int = 1) -> None:
        """Change the multiplicity of ``record`` by ``diff`` at ``time``, through the next worker's session."""
        self._session().update(record, time, diff)

    def update_many(self, records, times, diffs) -> None:
        """Many updates, dealt round-robin to the workers as whole columns."""
        n, w = len(self.sessions), self._next
        times, diffs = np.asarray(times), np.asarray(diffs)
        records = records if isinstance(records, (np.ndarray, RecordColumns)) else list(records)
        for i, s in enumerate(self.sessions):
            index = np.arange((i - w) % n, len(diffs), n)
            part = records[index] if isinstance(records, np.ndarray) else records.take(index) \
                if isinstance(records, RecordColumns) else [records[j] for j in index.tolist()]
            s.update_many(part, times[index], diffs[index])
        self._next += len(diffs)

    def advance_to(self, time: int) -> None:
        """Advance every worker's session to ``time``."""
        for s in self.sessions:
            s.advance_to(time)

    def close(self) -> None:
        """Close every worker's session."""
        for s in self.sessions:
            s.close()


class MergedCapture:
    """The union of the workers' captures of one output: each worker holds the updates of the keys
    it owns, so the union is the output of the whole dataflow."""

    def __init__(self, captures: Sequence[Capture]) -> None:
        self.captures = list(captures)

    @property
    def frontier(self) -> list:
        """The output frontier (the same on every worker: they share one clock)."""
        frontiers = {tuple(c.frontier) for c in self.captures}
        if len(frontiers) != 1:
            raise DataflowError(f"the workers' output frontiers differ: {sorted(frontiers)}")
        return list(frontiers.pop())

    def at(self, time) -> dict:
        """``{record: multiplicity}`` accumulated at the complete time ``time`` over all workers."""
        total: dict = {}
        for c in self.captures:
            for record, diff in c.at(time).items():
                total[record] = total.get(record, 0) + diff
        return {r: d for r, d in total.items() if d}

    @property
    def updates(self) -> list[tuple[object, object, int]]:
        """The consolidated ``(record, time, diff)`` of every worker."""
        total: dict = {}
        for c in self.captures:
            for record, time, diff in c.updates:
                total[(record, time)] = total.get((record, time), 0) + diff
        return [(r, t, d) for (r, t), d in total.items() if d]

    def drain(self) -> list[tuple[object, object, int]]:
        """The final updates of every worker since the previous drain, consolidated."""
        total: dict = {}
        for c in self.captures:
            for record, time, diff in c.drain():
                total[(record, time)] = total.get((record, time), 0) + diff
        return [(r, t, d) for (r, t), d in total.items() if d]
