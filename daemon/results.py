"""The result-topic client: follow the output protocol, keep the accumulated collection.

A result topic holds, per partition, batches of updates naming their epoch ``[lower, upper)``
and writer incarnation, and progress markers ``(lower, upper, incarnation, count)`` (see `wire`
and `sink`). The client keeps, per partition, the frontier ``final`` below which every time is
final, and the updates it has read per (incarnation, lower, upper) that are not final yet. When
a marker arrives for a range that reaches past ``final``, the updates of the same incarnation
and range must number exactly ``count``; those at times ``>= final`` become final and ``final``
moves to ``upper``. So an epoch counts once however often it was written: re-sent epochs,
broker retries, and records of aborted transactions (shown by brokers that do not hide them)
are dropped - the latter never get a marker of their own, or carry exactly the deterministic
output when they do.

The topic's frontier is the minimum over partitions. `view` is the collection accumulated over
every time below it; only complete times are ever visible. `poll` returns a `Change` each time
the frontier moves, with the updates that became final; `changes()` iterates them live.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError as RdKafkaError, KafkaException, TopicPartition

from .exceptions import KafkaError, ProtocolError
from .kafka import client_config, topic_partitions
from .wire import MIN_TIME, OutputBatch, decode_output

__all__ = ["Change", "ResultClient", "read_final_frontiers", "CLOSED"]

CLOSED = 2**63  # internal frontier of a partition whose writer closed it (upper nil)

Update = tuple[Any, int, int]


@dataclass(frozen=True)
class Change:
    """The topic's frontier moved to ``frontier`` (None: closed, everything is final);
    ``updates`` are the ones that became final, sorted by time."""

    frontier: int | None
    updates: list[Update]


@dataclass
class ProtocolStats:
    epochs: int = 0  # accepted (partition, range) markers
    duplicate_epochs: int = 0  # markers for ranges already final
    dropped_updates: int = 0  # updates of re-sent, duplicated or aborted epochs
    incomplete_epochs: int = 0  # markers whose count does not match what was read (ignored)
    messages: int = 0


@dataclass
class _Partition:
    final: int = MIN_TIME
    pending: dict[tuple[str, int, int | None], list[Update]] = field(default_factory=lambda: defaultdict(list))
    at_end: bool = False
    mismatch: str = ""


class _Follower:
    """The protocol state machine of one result topic (no I/O)."""

    def __init__(self, topic: str, partitions: int, *, keep_view: bool, stats: ProtocolStats) -> None:
        self.topic = topic
        self.keep_view = keep_view
        self.stats = stats
        self.partitions = [_Partition() for _ in range(partitions)]
        self.staged: list[Update] = []
        self.view: dict[Any, int] = {}
        self.frontier = MIN_TIME

    def apply(self, partition: int, offset: int, value: bytes | None) -> Change | None:
        """Apply one message; a Change when it moved the topic's frontier."""
        self.stats.messages += 1
        try:
            msg = decode_output(value)
        except Exception as exc:
            raise ProtocolError(f"{self.topic}[{partition}] offset {offset}: {exc}") from exc
        state = self.partitions[partition]
        upper = CLOSED if msg.upper is None else msg.upper
        key = (msg.incarnation, msg.lower, msg.upper)
        if isinstance(msg, OutputBatch):
            if upper <= state.final:
                self.stats.dropped_updates += len(msg.updates)
            else:
                state.pending[key].extend(msg.updates)
            return None
        found = state.pending.pop(key, [])
        where = f"{self.topic}[{partition}] offset {offset}: epoch [{msg.lower}, {msg.upper}) of incarnation {msg.incarnation}"
        if upper <= state.final:
            self.stats.duplicate_epochs += 1
            self.stats.dropped_updates += len(found)
            return None
        if msg.lower > state.final:
            raise ProtocolError(
                f"{where} starts after the final frontier {state.final}: epochs are missing"
                + (f" (the last one seen was not complete: {state.mismatch})" if state.mismatch else "")
            )
        if len(found) != msg.count:
            # not this attempt's records alone (e.g. an aborted attempt of the same incarnation is
            # visible): ignore it and wait for a re-sent epoch; a gap after it raises above
            state.mismatch = f"{where}: the marker counts {msg.count} updates, the topic holds {len(found)}"
            self.stats.incomplete_epochs += 1
            self.stats.dropped_updates += len(found)
            return None
        fresh = []
        for update in found:
            t = update[1]
            if not msg.lower <= t < upper:
                raise ProtocolError(f"{where}: update {update!r:.120} has a time outside the epoch")
            if t >= state.final:
                fresh.append(update)
            else:
                self.stats.dropped_updates += 1
        state.final = upper
        state.mismatch = ""
        self.stats.epochs += 1
        self.staged.extend(fresh)
        for stale in [k for k in state.pending if (CLOSED if k[2] is None else k[2]) <= upper]:
            self.stats.dropped_updates += len(state.pending.pop(stale))
        return self._advance()

    def _advance(self) -> Change | None:
        frontier = min(p.final for p in self.partitions)
        if frontier <= self.frontier:
            return None
        self.frontier = frontier
        final = [u for u in self.staged if u[1] < frontier]
        self.staged = [u for u in self.staged if u[1] >= frontier] if len(final) < len(self.staged) else []
        final.sort(key=lambda u: u[1])
        if self.keep_view:
            view = self.view
            for record, _, diff in final:
                count = view.get(record, 0) + diff
                if count:
                    view[record] = count
                else:
                    del view[record]
        return Change(None if frontier >= CLOSED else frontier, final)


def _consumer_config(kafka_options: Mapping[str, Any], consumer_options: Mapping[str, Any] | None) -> dict[str, Any]:
    role = {
        "group.id": f"ddflow-results-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }
    config = client_config({**kafka_options, **(consumer_options or {})}, role, who="result client")
    config.setdefault("fetch.wait.max.ms", 100)
    config.setdefault("auto.offset.reset", "earliest")
    return config


def _read(consumer: Consumer, followers: Mapping[str, _Follower], timeout: float, max_messages: int) -> list[tuple[str, Change]]:
    try:
        messages = consumer.consume(num_messages=max_messages, timeout=timeout)
    except KafkaException as exc:
        raise KafkaError(f"reading result topics {sorted(followers)}: {exc}") from exc
    changes = []
    for msg in messages:
        follower = followers[msg.topic()]
        err = msg.error()
        if err is not None:
            if err.code() == RdKafkaError._PARTITION_EOF:
                follower.partitions[msg.partition()].at_end = True
                continue
            raise KafkaError(f"reading {msg.topic()}[{msg.partition()}]: {err}")
        follower.partitions[msg.partition()].at_end = False
        change = follower.apply(msg.partition(), msg.offset(), msg.value())
        if change is not None:
            changes.append((msg.topic(), change))
    return changes


def _catch_up(consumer: Consumer, followers: Mapping[str, _Follower], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    states = [p for f in followers.values() for p in f.partitions]
    # at_end is set by the consumer's end-of-partition event and cleared by every message; the
    # event comes once per arrival at the end, so it is not reset here
    while not all(p.at_end for p in states):
        if time.monotonic() > deadline:
            behind = [f"{f.topic}[{i}]" for f in followers.values() for i, p in enumerate(f.partitions) if not p.at_end]
            raise KafkaError(f"catching up on result topics: {behind} not at their end after {timeout} s")
        _read(consumer, followers, 0.05, 10_000)


def _assign(consumer: Consumer, followers: Mapping[str, _Follower]) -> None:
    # offset 0 (not OFFSET_BEGINNING): librdkafka waits ~0.5 s before resolving a logical offset;
    # auto.offset.reset=earliest covers topics whose start was deleted
    assignment = [TopicPartition(t, p, 0) for t, f in followers.items() for p in range(len(f.partitions))]
    try:
        consumer.assign(assignment)
    except KafkaException as exc:
        raise KafkaError(f"assigning result topics {sorted(followers)}: {exc}") from exc


class ResultClient:
    """Consume a result topic from the beginning and maintain the final accumulated view."""

    def __init__(
        self,
        topic: str,
        kafka_options: Mapping[str, Any],
        *,
        consumer_options: Mapping[str, Any] | None = None,
        keep_view: bool = True,
    ) -> None:
        self.topic = topic
        self.keep_view = keep_view
        self._kafka_options = dict(kafka_options)
        self._config = _consumer_config(kafka_options, consumer_options)
        self._consumer: Consumer | None = None
        self.stats = ProtocolStats()
        self._follower = _Follower(topic, 0, keep_view=keep_view, stats=self.stats)

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> ResultClient:
        count = topic_partitions(self._kafka_options, self.topic)
        self._follower = _Follower(self.topic, count, keep_view=self.keep_view, stats=self.stats)
        self._consumer = Consumer(self._config)
        _assign(self._consumer, {self.topic: self._follower})
        return self

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def __enter__(self) -> ResultClient:
        return self.open() if self._consumer is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state -------------------------------------------------------------------------------------

    @property
    def frontier(self) -> int | None:
        """Every time below it is final (None: the topic is closed, everything is final)."""
        f = self._follower.frontier
        return None if f >= CLOSED else f

    @property
    def closed(self) -> bool:
        return self._follower.frontier >= CLOSED

    @property
    def partition_frontiers(self) -> list[int | None]:
        return [None if p.final >= CLOSED else p.final for p in self._follower.partitions]

    @property
    def view(self) -> dict[Any, int]:
        """The collection accumulated over every final time: record -> multiplicity (non-zero)."""
        return dict(self._follower.view)

    # -- reading -----------------------------------------------------------------------------------

    def _require(self) -> Consumer:
        if self._consumer is None:
            raise KafkaError(f"result client for {self.topic!r}: not open (use it as a context manager)")
        return self._consumer

    def poll(self, timeout: float = 0.1, *, max_messages: int = 10_000) -> list[Change]:
        """Read what is available (waiting up to ``timeout``); one Change per frontier move."""
        return [c for _, c in _read(self._require(), {self.topic: self._follower}, timeout, max_messages)]

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition is at its end; KafkaError after ``timeout`` seconds."""
        _catch_up(self._require(), {self.topic: self._follower}, timeout)

    def wait_for(self, frontier: int | None, timeout: float = 30.0) -> bool:
        """Poll until the frontier reaches ``frontier`` (None: until closed); False on timeout."""
        target = CLOSED if frontier is None else frontier
        deadline = time.monotonic() + timeout
        while self._follower.frontier < target:
            if time.monotonic() > deadline:
                return False
            self.poll(0.05)
        return True

    def changes(self, *, timeout: float | None = None, poll_timeout: float = 0.05) -> Iterator[Change]:
        """Iterate changes live; stops when the topic is closed or ``timeout`` seconds pass.
        While a Change is being handled, `view` is the view at its frontier."""
        consumer = self._require()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.closed and (deadline is None or time.monotonic() < deadline):
            yield from self._changes_one_by_one(consumer, poll_timeout)

    def _changes_one_by_one(self, consumer: Consumer, timeout: float) -> Iterator[Change]:
        # apply message by message so the view matches each Change when it is yielded
        try:
            messages = consumer.consume(num_messages=10_000, timeout=timeout)
        except KafkaException as exc:
            raise KafkaError(f"reading result topic {self.topic!r}: {exc}") from exc
        follower = self._follower
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == RdKafkaError._PARTITION_EOF:
                    follower.partitions[msg.partition()].at_end = True
                    continue
                raise KafkaError(f"reading {self.topic}[{msg.partition()}]: {err}")
            follower.partitions[msg.partition()].at_end = False
            change = follower.apply(msg.partition(), msg.offset(), msg.value())
            if change is not None:
                yield change


def read_final_frontiers(
    topics: Sequence[str], kafka_options: Mapping[str, Any], *, timeout: float = 30.0
) -> dict[str, list[int]]:
    """Per topic and partition, the frontier the result topic already marks final (MIN_TIME if
    none; `CLOSED` if closed). One consumer reads all topics to their end."""
    stats = ProtocolStats()
    followers = {t: _Follower(t, topic_partitions(kafka_options, t), keep_view=False, stats=stats) for t in topics}
    consumer = Consumer(_consumer_config(kafka_options, None))
    try:
        _assign(consumer, followers)
        _catch_up(consumer, followers, timeout)
    finally:
        consumer.close()
    return {t: [p.final for p in f.partitions] for t, f in followers.items()}
