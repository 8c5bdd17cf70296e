"""The worker: a source -> an engine Dataflow -> a sink, one epoch at a time.

The worker knows the `io.Source` and `io.Sink` protocols only: `factory` builds it over Kafka
(`KafkaSource`, `KafkaSink`, `Recovery`, `TopicWatch` from one config), `testing` over memory.

A step polls a batch of messages and feeds the good updates to the dataflow's inputs at once
(the engine accepts any time at or beyond its frontier, so nothing is buffered here), but never
more than ``max_epoch_updates`` that no closed epoch holds yet (``open_updates``; one message may
overshoot): then the epoch closes at the input frontier, or if it cannot (a partition holds the
frontier back) only the partitions holding it are read, each up to its next marker, the others
paused until an epoch closes (`Source.pause_ahead`); from half of the bound on, partitions ahead of
the frontier already wait, leaving the other half to those holding it. So a backlog is caught up in
epochs of bounded size, in bounded memory.
When the epoch policy says so, the epoch closes (`epochs`: the dataflow runs, the outputs are
published and committed). While published epochs wait for their commit, a poll waits at most
``COMMIT_POLL_S`` (not at all right after an epoch closed); one that finds nothing to read commits
them at once (an idle loop does not wait for the commit interval, see `commits`).

Without a checkpoint directory a worker rebuilds its state by replaying the input topics from
the beginning; the sink then skips times the result topics already hold as final. With one
(`recovery`), it writes a checkpoint of its input collections every ``checkpoint_interval``
seconds at an epoch boundary and on stop, restores the newest valid one on open and resumes its
inputs at the recorded offsets; reclocked inputs replay their recorded times. With
``snapshot_from`` (a backfill) and no checkpoint yet, it loads that snapshot. While a snapshot
loads, the worker consumes live input but holds its frontier at the snapshot's frontier ``F``;
then it publishes the output at ``F`` and the live epochs follow. `stop()` (e.g. from a SIGTERM
handler) makes `run` publish what is complete, write a checkpoint, and return (a lone worker
stopped while its snapshot loads drops the load: nothing is published, the next start loads it).

While open, a `TopicWatch` compares the input, output and dead-letter topics with what they were at
open; a topic that vanished, was recreated or changed its partition count stops the worker with
`TopicChanged` naming it. The loop records its progress: ``progressed`` (monotonic seconds) and
``activity`` change at every step and at every phase of an epoch, and ``stats.loop_time`` holds the
wall time of the last step, so a supervisor can tell a loop that stopped (see `service`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ..operators.lattice import T_MIN
from .block import Block
from .epochs import EpochCloser
from .exceptions import KafkaClientError, OptionsError, TopicChanged, WorkerError
from .input.progress import EpochPolicy
from .input.stalls import StallWatch
from .io import Sink, Source
from .kafka.client import bounded
from .kafka.topics import TopicWatch
from .observe.stats import EpochReport, Stats
from .state.recovery import Recovery, SnapshotLoader

__all__ = ["Worker", "DataflowFactory"]

log = logging.getLogger("ddflow.daemon.worker")

# the poll's timeout while published epochs wait for their commit (the loop is otherwise idle)
COMMIT_POLL_S = 0.001

# factory(dataflow, {input name: Collection}) -> {output name: Collection}
DataflowFactory = Callable[[Any, Mapping[str, Any]], Mapping[str, Any]]


class Worker(EpochCloser):
    """One worker process's data path. Use as a context manager, or call `run`."""

    def __init__(
        self,
        dataflow: DataflowFactory,
        source: Source,
        sink: Sink,
        *,
        recovery: Recovery | None = None,
        epochs: EpochPolicy | None = None,
        stats: Stats | None = None,
        watch: Callable[[], TopicWatch] | None = None,
        start_offsets: Mapping[tuple[str, int], int] | None = None,
        max_poll_messages: int = 10_000,
        max_epoch_updates: int | None = 100_000,
        poll_timeout: float = 0.05,
        dead_letter_commit_s: float = 5.0,
    ) -> None:
        """``dataflow(df, {input name: Collection}) -> {output name: Collection}`` builds the
        dataflow; ``source`` and ``sink`` are the two sides of the data path (`io`; a bad update's
        dead letter goes from the source to the sink's writer, set up by whoever built them, e.g.
        `factory.kafka_worker`); ``recovery`` checkpoints and restores the inputs (None: a restart
        replays them from ``start_offsets``, default the beginning); ``epochs`` when to close an
        epoch; ``stats`` the counters (default the source's); ``watch`` makes the `TopicWatch`
        started at each open and checked at every step; ``max_epoch_updates`` the input updates
        in flight before an epoch must close (None: unbounded; see the module's docstring)."""
        if not callable(dataflow):
            raise OptionsError(f"Worker dataflow: expected a callable, got {dataflow!r}")
        if type(max_poll_messages) is not int or max_poll_messages <= 0:
            raise OptionsError(f"Worker max_poll_messages: expected a positive int, got {max_poll_messages!r}")
        if max_epoch_updates is not None and (type(max_epoch_updates) is not int or max_epoch_updates <= 0):
            raise OptionsError(f"Worker max_epoch_updates: expected a positive int or None, got {max_epoch_updates!r}")
        for side, obj, kind in (("source", source, Source), ("sink", sink, Sink)):
            if not isinstance(obj, kind):
                raise OptionsError(f"Worker {side}: {obj!r} does not implement ddflow.daemon.io.{kind.__name__}")
        self.factory = dataflow
        self.source = source
        self.sink = sink
        self.input_specs = list(source.inputs)
        self.output_specs = list(sink.outputs)
        self.epoch_policy = epochs or EpochPolicy()
        self.stats = stats or source.stats
        self.start_offsets = start_offsets
        self.max_poll_messages = max_poll_messages
        self.max_epoch_updates = max_epoch_updates
        self.poll_timeout = poll_timeout
        self.dead_letter_commit_s = dead_letter_commit_s
        self.recovery = recovery
        self._watch = watch
        self.watch: TopicWatch | None = None  # the watch while open
        self.progressed = time.monotonic()  # when the loop last moved on (a step, a phase of an epoch)
        self.activity = "opening"  # what the loop is doing now, for a stall's report
        self._loading: SnapshotLoader | None = None
        self._held = T_MIN  # the frontier of the snapshot being loaded
        self.dataflow: Any = None
        self.frontier = T_MIN  # what the engine's inputs were advanced to: the open epoch's lower
        self._sessions: dict[str, Any] = {}
        self._captures: dict[str, Any] = {}
        self._stop = threading.Event()
        self._open = False
        self._epoch_records = 0
        self._epoch_opened = time.monotonic()
        self._epoch_in: dict[str, int] = {}
        self._waiting: deque[tuple[str, float, int, int]] = deque()  # latency bookkeeping per batch
        self._unsettled: deque[EpochReport] = deque()  # closed epochs whose commit has not landed yet
        self._failures_ahead: list[Any] = []  # user functions' failures whose epoch has not closed yet
        self._closed_epochs = 0
        self._just_closed = False  # an epoch closed in the last step (the next poll does not wait)
        self._open_times: list[Any] = []  # times (numpy) of the updates fed at or beyond the frontier
        self.open_updates = 0  # updates fed and in no closed epoch yet (held by the engine)
        self.peak_open_updates = 0
        self.stalls = StallWatch()  # says what holds the output frontier back (`input.stalls`)
        self._topics = {spec.name: spec.topic for spec in self.input_specs}

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def assigned(self) -> bool:
        return self._open and self.source.assigned

    def open(self) -> Worker:
        """Build the dataflow, read the result topics back, and assign the inputs."""
        if self._open:
            return self
        df = self._new_dataflow()
        self._sessions = {spec.name: df.new_input(spec.name) for spec in self.input_specs}
        try:
            produced = self.factory(df, {name: s.collection for name, s in self._sessions.items()})
        except Exception as exc:
            raise WorkerError(f"building the dataflow with {self.factory!r}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(produced, Mapping):
            raise WorkerError(f"building the dataflow: the factory returned {type(produced).__name__}, not a dict")
        missing = [o.name for o in self.output_specs if o.name not in produced]
        if missing:
            raise WorkerError(
                f"building the dataflow: outputs {missing} are configured but the factory returned only "
                f"{sorted(produced)}"
            )
        self._captures = {o.name: produced[o.name].capture(history=False) for o in self.output_specs}
        if self.recovery is not None and self.recovery.enabled:  # checkpoints read the inputs from the engine
            self.recovery.attach({name: session.state() for name, session in self._sessions.items()})
        self.dataflow = df
        start_offsets, snapshot, bindings, floors = self.start_offsets, None, None, None
        if self.recovery is not None:
            snapshot = self._choose_snapshot()
            offsets = self.recovery.start_offsets(snapshot)
            if snapshot is not None:
                start_offsets = offsets
            bindings, floors = self.recovery.bindings, self.recovery.floors
        with contextlib.ExitStack() as stack:
            shared = self.recovery is not None and self.recovery.shared(snapshot)  # one worker's share of it
            self.sink.open(None if shared else Recovery.output_positions(snapshot), stop=self._stop.is_set)
            stack.callback(self.sink.close)
            self.source.open(start_offsets, bindings, floors=floors, progress=Recovery.progress(snapshot),
                             floor=None if snapshot is None else snapshot.frontier)
            stack.callback(self.source.close)
            if self._watch is not None:
                self.watch = self._watch().start()
            stack.pop_all()
        if snapshot is not None and self.recovery is not None:
            self._loading = self.recovery.load(snapshot)
            self._held = snapshot.frontier
        self._open = True
        self._doing("opened")
        self._epoch_opened = time.monotonic()
        log.info("worker open: inputs %s, outputs %s, epochs %s, incarnation %s",
                 [(i.name, i.topic, i.policy) for i in self.input_specs],
                 [(o.name, o.topic) for o in self.output_specs], self.epoch_policy, self.sink.incarnation)
        return self

    def _choose_snapshot(self) -> Any:
        """The snapshot to restore (`Recovery.choose`; one worker of several may refuse it)."""
        assert self.recovery is not None
        return self.recovery.choose()

    def _new_dataflow(self) -> Any:
        """The engine dataflow to build (one worker's of several in `cluster.ClusterWorker`)."""
        from ..operators import Dataflow

        return Dataflow()

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.close()
        dead_letters = getattr(self.sink, "dead_letters", None)
        if dead_letters is not None:
            dead_letters.said.close()  # the dead-letter counts not said yet
        try:
            try:
                bounded(self.source.close, 10.0, "closing the input consumer")
            except KafkaClientError as exc:
                log.warning("%s", exc)
        finally:
            try:
                self.sink.close()
            finally:
                if self.recovery is not None:
                    self.recovery.finish()  # a checkpoint being written completes

    def __enter__(self) -> Worker:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def stop(self) -> None:
        """Ask `run` to publish what is complete and return (safe from signal handlers/threads)."""
        self._stop.set()

    # -- the loop ----------------------------------------------------------------------------------

    def _doing(self, activity: str) -> None:
        """The loop moves on to ``activity`` (its progress, for stall detection)."""
        self.activity = activity
        self.progressed = time.monotonic()

    def step(self) -> EpochReport | None:
        """Poll once, feed the dataflow, and close an epoch if the policy says so."""
        if not self._open:
            raise WorkerError("worker step: the worker is not open (call open() or use it as a context manager)")
        if self.watch is not None and self.watch.problem is not None:
            raise TopicChanged(self.watch.problem)
        self._doing("polling the inputs")
        self.stats.loop_time = time.time()
        late_at = self.frontier if self._loading is None else max(self.frontier, self._held)
        room = None
        if self.max_epoch_updates is not None:
            room = self.max_epoch_updates - self.open_updates
            if room <= 0:  # the epoch is full: close it if the frontier allows, else read only what holds it
                if self._loading is not None:  # nothing closes before the snapshot is loaded: read nothing
                    self._loading.wait(self.poll_timeout)
                    return self._finish_loading() if self._loading.done() else None
                report = self._maybe_close(force=False, full=True)
                if report is not None:
                    return report
                frontier = self.source.frontier()
                self.source.pause_ahead(frontier)
                # the partitions holding the frontier, each up to its next marker (without a
                # frontier yet, nothing is paused: one message with updates at a time)
                room = None if frontier is not None else 1
            elif 2 * self.open_updates >= self.max_epoch_updates and self._loading is None:
                # half full: partitions ahead of the frontier wait, so that those holding it have
                # the other half to catch up in (epochs then close on the policy's grid)
                self.source.pause_ahead(self.source.frontier(), hold=False)
        # epochs waiting for a commit: look for more input without blocking (right after an epoch
        # closed) or not for long, so that an idle loop commits them at once and takes a commit's
        # outcome as soon as it landed
        waiting = self.sink.pending() > 0
        timeout = self.poll_timeout if not waiting else 0.0 if self._just_closed else \
            min(self.poll_timeout, COMMIT_POLL_S)
        polled = self.source.poll(late_at, max_messages=self.max_poll_messages, timeout=timeout,
                                  max_updates=room)
        self._just_closed = False
        for name, blocks in polled.blocks.items():
            if not blocks:
                continue
            block = Block.concat(blocks)
            session = self._sessions[name]
            try:
                session.update_many(block.records, block.times, block.diffs)
            except Exception as exc:
                raise WorkerError(
                    f"epoch from {self.frontier}: feeding input {name!r}: {type(exc).__name__}: {exc}"
                ) from exc
            if self.recovery is not None:
                self.recovery.fed(name, block.diffs)
            self._open_times.append(block.times)
            self.open_updates += len(block)
            self._epoch_records += len(block)
            self._epoch_in[name] = self._epoch_in.get(name, 0) + len(block)
        self.peak_open_updates = max(self.peak_open_updates, self.open_updates)
        self._waiting.extend(polled.batches)
        dead_letters = getattr(self.sink, "dead_letters", None)
        if dead_letters is not None:
            dead_letters.tick()  # the dead-letter counts due in the log
        self.stalls.check(frontier=self.frontier, open_updates=self.open_updates, stats=self.stats,
                          topics=self._topics, resolution_ns=self.epoch_policy.resolution_ns,
                          paused=getattr(self.source, "paused", ()))
        if self.sink.staged_for() > self.dead_letter_commit_s:
            self._committing()
            self.sink.commit_dead_letters()
            self._settle()
        elif self._unsettled:
            self._committing()
            if self.sink.maybe_commit(idle=waiting and polled.messages == 0):
                self._settle()
        if self.recovery is not None:
            self.recovery.collect()
        if self._loading is not None:  # the frontier is held at the snapshot's until it is loaded
            return self._finish_loading() if self._loading.done() else None
        return self._maybe_close(force=False)

    @property
    def loading(self) -> bool:
        """Whether a snapshot is still loading (the frontier is held at its frontier)."""
        return self._loading is not None

    def run(
        self,
        stop_event: threading.Event | None = None,
        *,
        timeout: float | None = None,
        count: int | None = None,
        until: int | None = None,
    ) -> int:
        """Step until stopped (`stop()` or ``stop_event``), ``timeout`` seconds pass, ``count``
        epochs were published, or the output frontier reaches ``until``. On stop, every complete
        time is published first (a last epoch up to the exact input frontier, even between two
        boundaries of a fixed resolution). Returns the number of epochs published. A worker that
        `run` opened is closed when it returns."""
        opened_here = not self._open
        self.open()
        deadline = None if timeout is None else time.monotonic() + timeout
        epochs = 0
        try:
            try:
                epochs = self._loop(stop_event, deadline, count, until)
            except Exception as exc:
                watch = self.watch
                if watch is not None and not isinstance(exc, TopicChanged) and watch.check() is not None:
                    raise TopicChanged(watch.problem or "") from exc  # the cause, not its symptom
                raise
        finally:
            if opened_here:
                self.close()
        return epochs

    def _loop(self, stop_event: threading.Event | None, deadline: float | None, count: int | None,
              until: int | None) -> int:
        """`run`'s loop; returns the number of epochs published."""
        epochs = 0
        while True:
            if self.watch is not None and self.watch.problem is not None:
                raise TopicChanged(self.watch.problem)  # before a stop publishes on a changed topic
            if self._stop.is_set() or (stop_event is not None and stop_event.is_set()):
                if self._loading is not None:
                    if self._stop_loading():  # a lone worker drops the load: nothing to publish
                        break
                    epochs += 1
                self._doing("stopping: publishing what is complete")
                if self._close_on_stop() is not None:
                    epochs += 1
                self.commit()
                recovery = self.recovery
                if recovery is not None and recovery.enabled:
                    recovery.finish()
                    if recovery.last_frontier != self.frontier and self.frontier > T_MIN:
                        self._checkpoint(self.frontier, force=True)
                self._doing("stopped")
                log.info("worker stopping at frontier %s after %d epochs", self.frontier, epochs)
                break
            if deadline is not None and time.monotonic() >= deadline:
                self.commit()
                break
            if self.step() is not None:
                epochs += 1
                if count is not None and epochs >= count:
                    self.commit()
                    break
            if until is not None and self.frontier >= until:
                self.commit()
                break
        return epochs
