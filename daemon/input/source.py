"""Kafka sources: read input topics in batches, validate, track per-partition progress.

One `KafkaSource` reads every input of a worker through one consumer that is *assigned* the
partitions of the input topics (no group rebalancing: a worker owns its inputs): all of them, or,
as worker ``i`` of ``W`` (``worker=(i, W)``), the partitions ``p`` with ``p % W == i``. Each message is
decoded by its input's format (`formats`: msgpack, json, debezium). Each poll returns the good
updates per input, ready for the engine; null values of debezium inputs (tombstones) are counted
and skipped; malformed messages and rejected late
updates go to the dead-letter writer with their topic/partition/offset and reason, and the rest
of the message is kept. Progress follows the input's policy (`progress.InputProgress`); the
worker's input frontier is the meet over inputs (`frontier`).

Late updates (behind their partition's frontier when read) are moved to it or dead-lettered by
the input's ``late`` policy (`rejects`), depending only on the offsets read. Reclocked inputs get
arrival times that are never late; with `reclock` bindings (a worker with checkpoints) each poll's
assignment is recorded, and a replay gives bound offsets their recorded time and holds the input's
frontier at the next bound time. The consumer calls are in `consumer`; reading only the
partitions that can move the frontier, in `pacing`.

With ``strict_offsets`` (a worker with checkpoints) an offset the broker no longer holds raises
`RecoveryError` instead of jumping to the earliest offset and skipping data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError as RdKafkaError, TopicPartition

from ...operators.lattice import T_MIN
from ..block import Block
from ..deadletter import DeadLetterWriter
from ..exceptions import KafkaClientError, OptionsError, RecoveryError
from ..io import Polled
from ..observe.stats import InputStats, PartitionStats, Stats
from .consumer import ConsumerTransport
from .floors import FloorLog
from .inputs import InputSpec
from .intake import Intake
from .pacing import Pacing
from .progress import Bound, InputProgress, ReclockClock, meet_bounds
from .reclock import ReclockBindings
from .rejects import dead_letter, late_updates

__all__ = ["InputSpec", "Polled", "KafkaSource"]

log = logging.getLogger("ddflow.daemon.input.source")


class _Input:
    """Runtime state of one input."""

    def __init__(self, spec: InputSpec, progress: InputProgress, stats: InputStats) -> None:
        self.spec = spec
        self.progress = progress
        self.stats = stats


class KafkaSource(ConsumerTransport, Pacing):
    """Batched, assigned consumption of all partitions of the input topics (an `io.Source`)."""

    def __init__(
        self,
        inputs: Sequence[InputSpec],
        kafka_options: Mapping[str, Any],
        *,
        group_id: str = "ddflow",
        dead_letters: DeadLetterWriter | None = None,
        stats: Stats | None = None,
        consumer_options: Mapping[str, Any] | None = None,
        clock: ReclockClock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        lag_interval: float = 1.0,
        strict_offsets: bool = False,
        worker: tuple[int, int] = (0, 1),
    ) -> None:
        if not inputs:
            raise OptionsError("KafkaSource: no inputs given")
        index, count = worker
        if type(count) is not int or count < 1 or type(index) is not int or not 0 <= index < count:
            raise OptionsError(f"KafkaSource worker: expected (index, count) with 0 <= index < count, got {worker!r}")
        self.worker = (index, count)
        names = [i.name for i in inputs]
        topics = [i.topic for i in inputs]
        for label, values in (("name", names), ("topic", topics)):
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise OptionsError(f"KafkaSource: inputs share the {label} {dupes[0]!r}; each input needs its own")
        self.stats = stats or Stats()
        self.dead_letters = dead_letters
        self._monotonic = monotonic
        self._clock = clock or ReclockClock()
        self._inputs = {
            i.topic: _Input(
                i,
                InputProgress(i.policy, idle_timeout=i.idle_timeout, clock=self._clock, monotonic=monotonic),
                self.stats.input(i.name),
            )
            for i in inputs
        }
        self._kafka_options = dict(kafka_options)
        self._config = self._client_config(kafka_options, group_id, consumer_options, strict_offsets)
        self._next: dict[tuple[str, int], int] = {}  # next offset to read per (topic, partition)
        self._bindings: dict[str, ReclockBindings] = {}
        self._floors: dict[str, FloorLog] = {}
        self._intake = Intake()  # messages read and not taken yet, partitions paused (see `pause_ahead`)
        self._consumer: Any = None
        self._lag_interval = lag_interval
        self._last_lag = 0.0

    @property
    def inputs(self) -> list[InputSpec]:
        return [i.spec for i in self._inputs.values()]

    def owned(self, count: int) -> list[int]:
        """The partitions of a topic of ``count`` partitions this worker reads: ``p % W == i``."""
        index, workers = self.worker
        return [p for p in range(count) if p % workers == index]

    @property
    def holds_partitions(self) -> bool:
        """Whether this worker reads any input partition (worker ``i`` of ``W`` reads none of a
        topic with ``i`` or fewer partitions); one that reads none holds no frontier back."""
        return any(state.progress.partitions for state in self._inputs.values())

    def open(
        self,
        start_offsets: Mapping[tuple[str, int], int] | None = None,
        bindings: Mapping[str, ReclockBindings] | None = None,
        *,
        floors: Mapping[str, FloorLog] | None = None,
        progress: Mapping[str, Mapping[int, tuple[int, int | None]]] | None = None,
        floor: int | None = None,
    ) -> None:
        """Assign this worker's partitions of every input topic (`owned`), from ``start_offsets``
        (topic, partition) -> offset where given, else from the beginning (state is rebuilt by replay).
        ``bindings``: topic -> reclock bindings of reclocked inputs (replayed and extended);
        ``floors``: topic -> partition floors of the other inputs (replayed and extended);
        ``progress``: topic -> partition -> (frontier, largest time) a checkpoint recorded at
        ``start_offsets`` (see `progress_state`); ``floor``: a time every partition's frontier
        starts at (a snapshot's frontier: everything before it is in the snapshot)."""
        self._bindings = dict(bindings or {})
        for bound in self._bindings.values():  # a restarted worker's wall clock may be behind its bindings
            if bound.last_time is not None:
                self._clock.catch_up(bound.last_time)
        self._floors = dict(floors or {})
        assignment = []
        for topic, state in self._inputs.items():
            count = self._partition_count(topic)
            owned = self.owned(count)
            if count % self.worker[1]:
                log.warning("input topic %r: %d partitions for %d workers: worker %d reads %s", topic, count,
                            self.worker[1], self.worker[0], owned)
            state.progress.assign(owned)
            recorded = (progress or {}).get(topic, {})
            log_ = self._floors.get(topic)
            for p in owned:
                # offset 0, not OFFSET_BEGINNING: librdkafka waits ~0.5 s to resolve a logical
                # offset; auto.offset.reset=earliest covers a start that retention deleted
                offset = (start_offsets or {}).get((topic, p), 0)
                assignment.append(TopicPartition(topic, p, offset))
                self._next[(topic, p)] = offset
                state.stats.partitions[p] = PartitionStats(offset=max(offset, 0))
                if state.spec.policy == "reclock":
                    continue
                if p in recorded:
                    state.progress.restore(p, *recorded[p])
                if floor is not None:
                    state.progress.raise_to(p, floor)
                at = None if log_ is None else log_.floor(p, offset)
                if at is not None:
                    state.progress.raise_to(p, at)
        self._consumer = self._assign(assignment)
        if self.dead_letters is not None and assignment:
            self.dead_letters.written_below(self._committed_or_none(assignment))
        log.info("inputs assigned: %s", ", ".join(f"{t}{sorted(s.progress.partitions)}" for t, s in self._inputs.items()))

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._intake.clear()
        if consumer is not None:
            consumer.close()

    def bounds(self) -> dict[str, Bound | None]:
        """Each input's frontier now."""
        result = {}
        for topic, state in self._inputs.items():
            if topic in self._floors:  # floors recorded at the next offsets to read
                for p in state.progress.partitions:
                    self._apply_floors(state, topic, p, self._next[(topic, p)])
            bound = state.progress.bound()
            bindings = self._bindings.get(state.spec.topic)
            if bindings is not None and bound is not None:
                holds = [bindings.hold(p, self._next[(state.spec.topic, p)]) for p in state.progress.partitions]
                held = [t for t in holds if t is not None]
                if held and min(held) < bound.time:  # replaying bound offsets: not past their time
                    bound = Bound(min(held))
            state.stats.frontier = None if bound is None else bound.time
            for p, ps in state.progress.partitions.items():
                pstats = state.stats.partitions.setdefault(p, PartitionStats())
                pstats.frontier = ps.frontier
                pstats.idle = ps.idle
            result[state.spec.name] = bound
        return result

    def frontier(self) -> int | None:
        """The worker's input frontier: the meet over inputs (None: no progress known yet)."""
        return meet_bounds(self.bounds().values())

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to read per (topic, partition): everything before it was polled."""
        return dict(self._next)

    def raise_to(self, upper: int) -> None:
        """The worker's frontier moved to ``upper``: raise every partition still behind it (one
        that does not hold the frontier back) to ``upper``, recording a floor at its next offset."""
        for topic, state in self._inputs.items():
            if state.spec.policy == "reclock":
                continue
            log_ = self._floors.get(topic)
            for p, ps in state.progress.partitions.items():
                if ps.frontier < upper:
                    ps.frontier = upper
                    if log_ is not None:
                        log_.record(p, self._next[(topic, p)], upper)

    def persist(self) -> None:
        """Make the reclock bindings and partition floors recorded so far durable (before
        publishing outputs that depend on them)."""
        for bindings in self._bindings.values():
            bindings.persist()
        for floors in self._floors.values():
            floors.persist()

    def progress_state(self) -> dict[str, dict[int, tuple[int, int | None]]]:
        """topic -> partition -> (frontier, largest time seen) of the inputs that are not
        reclocked: what a checkpoint at `next_offsets` records for `open` to resume from."""
        return {
            topic: {p: (ps.frontier, ps.max_time) for p, ps in state.progress.partitions.items()}
            for topic, state in self._inputs.items() if state.spec.policy != "reclock"
        }

    def poll(
        self, frontier: int, *, max_messages: int = 10_000, timeout: float = 0.05, max_updates: int | None = None
    ) -> Polled:
        """Read up to ``max_messages``; ``frontier`` is what the engine's inputs were advanced to
        (a worker has raised every partition to it already, see `raise_to`). With ``max_updates``,
        take no message with updates once that many are taken (the rest of a message included),
        but the progress markers that follow: messages read and not taken wait, in order, for the
        next poll, and the consumer is asked for about as many as that will take (`intake`).
        Messages of `paused` partitions wait too."""
        intake = self._intake
        backlog = intake.backlog
        if not backlog:
            backlog.extend(self._consume(intake.wanted(max_messages, max_updates), timeout))
        now_mono = self._monotonic()
        now_wall = time.time()
        polled = Polled({s.spec.name: [] for s in self._inputs.values()})
        reclock_time: int | None = None
        fresh: dict[str, dict[int, int]] = {}  # reclocked topic -> partition -> upper, newly bound
        taken = got = 0  # messages taken, updates got
        while backlog and taken < max_messages:
            msg = backlog.popleft()
            taken += 1
            err = msg.error()
            topic, partition = msg.topic(), msg.partition()
            if intake.hold is not None and (topic, partition) not in intake.paused and self._past_hold(topic, partition):
                # it moved past the frontier held: its next messages wait, without pausing the
                # consumer (the next `pause_ahead` reads it again if it now holds the frontier)
                intake.held((topic, partition))
            if (topic, partition) in intake.paused and (err is None or err.code() == RdKafkaError._PARTITION_EOF):
                intake.wait((topic, partition), msg)  # read again once resumed
                continue
            if err is not None:
                if err.code() == RdKafkaError._PARTITION_EOF:
                    self._inputs[topic].progress.on_end(partition)
                    continue
                if err.fatal():
                    raise KafkaClientError(f"reading {topic}[{partition}]: {err}")
                if err.code() in (RdKafkaError._AUTO_OFFSET_RESET, RdKafkaError.OFFSET_OUT_OF_RANGE):
                    raise RecoveryError(
                        f"reading {topic}[{partition}] from offset {self._next.get((topic, partition))}: {err}; "
                        "the broker no longer holds that offset (retention, or a recreated topic) and skipping "
                        "to another one would lose or repeat updates"
                    )
                log.warning("reading %s[%s]: %s", topic, partition, err)
                continue
            state = self._inputs[topic]
            spec, stats = state.spec, state.stats
            value = msg.value()
            decoded = intake.decoded(msg)
            if max_updates is not None and got >= max_updates:
                # the updates wanted are taken: read on only what brings none (progress markers),
                # so that the epoch they close can close now
                if decoded is None:
                    decoded = spec.decoder.decode(value)
                if len(decoded):
                    intake.put_back(msg, decoded)  # not decoded again
                    break
            offset = msg.offset()
            self._next[(topic, partition)] = offset + 1
            polled.messages += 1
            stats.messages += 1
            stats.bytes += len(value) if value else 0
            pstats = stats.partitions.get(partition)
            if pstats is not None:
                pstats.offset = offset + 1
            state.progress.on_message(partition, now_mono)
            if spec.policy != "reclock":
                self._apply_floors(state, topic, partition, offset)
            if decoded is None:
                decoded = spec.decoder.decode(value)
            if decoded.tombstone:
                stats.tombstones += 1
            bad = list(decoded.malformed or ())  # one dead letter per message, whatever is wrong
            if decoded.progress is not None:
                if spec.policy == "reclock":
                    stats.ignored_progress_markers += 1
                else:
                    stats.progress_markers += 1
                    state.progress.on_progress(partition, decoded.progress)
            if not len(decoded):
                if bad:
                    dead_letter(self.dead_letters, self.stats, spec, topic, partition, offset, value, bad, key=msg.key())
                continue
            if spec.policy == "reclock":
                bindings = self._bindings.get(topic)
                bound = None if bindings is None else bindings.lookup(partition, offset)
                if bound is not None:
                    if bound < frontier:
                        raise RecoveryError(
                            f"replaying {topic}[{partition}] offset {offset}: its recorded time {bound} is behind "
                            f"the frontier {frontier}; the reclock bindings do not match this replay"
                        )
                    t = bound
                else:
                    if reclock_time is None:
                        last = T_MIN if bindings is None or bindings.last_time is None else bindings.last_time
                        reclock_time = max(self._clock.now(), frontier, last)
                    t = reclock_time
                    if bindings is not None:
                        fresh.setdefault(topic, {})[partition] = offset + 1
                block = decoded.block_at(t)
                lo = hi = t
            else:
                block = decoded.block
                behind = self._partition_frontier(state, topic, partition, offset, frontier)
                lo, hi = int(block.times.min()), int(block.times.max())
                if lo < behind:
                    block = Block.from_rows(late_updates(spec, stats, decoded, behind, bad))
                state.progress.on_times(partition, hi)
            if bad:
                dead_letter(self.dead_letters, self.stats, spec, topic, partition, offset, value, bad, key=msg.key())
            if not len(block):
                continue
            polled.blocks[spec.name].append(block)
            stats.updates += len(block)
            got += len(block)
            ts_type, ts_ms = msg.timestamp()
            arrival = ts_ms / 1000.0 if ts_type != 0 and 0 < ts_ms / 1000.0 <= now_wall else now_wall
            polled.batches.append((spec.name, arrival, len(block), max(hi, frontier)))
        intake.counted(polled.messages, got)
        if fresh and reclock_time is not None:
            for topic, upper in fresh.items():
                self._bindings[topic].bind(reclock_time, upper)
        if polled.messages:
            for state in self._inputs.values():
                if polled.blocks[state.spec.name]:
                    state.stats.last_update_time = now_wall
        if now_mono - self._last_lag >= self._lag_interval:
            self._last_lag = now_mono
            self._update_lag()
        return polled

    def _apply_floors(self, state: _Input, topic: str, partition: int, offset: int) -> None:
        """Raise ``partition`` by the floors recorded at offsets up to ``offset``."""
        log_ = self._floors.get(topic)
        if log_ is not None:
            at = log_.floor(partition, offset)
            if at is not None:
                state.progress.raise_to(partition, at)

    def _partition_frontier(self, state: _Input, topic: str, partition: int, offset: int, frontier: int) -> int:
        """The frontier of ``partition`` before its message at ``offset`` (floors applied),
        raised to the engine's ``frontier`` if it is still behind it (never in a worker, which
        raises partitions as it closes epochs; recorded as a floor)."""
        if state.progress.raise_to(partition, frontier):
            log_ = self._floors.get(topic)
            if log_ is not None:
                log_.record(partition, offset, frontier)
        return state.progress.partitions[partition].frontier
