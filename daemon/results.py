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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError as RdKafkaError, KafkaException, TopicPartition

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
        role = {
            "group.id": f"ddflow-results-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
        self._config = client_config({**kafka_options, **(consumer_options or {})}, role, who="result client")
        self._config.setdefault("fetch.wait.max.ms", 100)
        self._consumer: Consumer | None = None
        self._partitions: list[_Partition] = []
        self._staged: list[Update] = []
        self._view: dict[Any, int] = {}
        self._frontier = MIN_TIME
        self.stats = ProtocolStats()

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> ResultClient:
        count = topic_partitions(self._kafka_options, self.topic)
        self._partitions = [_Partition() for _ in range(count)]
        self._consumer = Consumer(self._config)
        try:
            self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(count)])
        except KafkaException as exc:
            raise KafkaError(f"assigning result topic {self.topic!r}: {exc}") from exc
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
        return None if self._frontier >= CLOSED else self._frontier

    @property
    def closed(self) -> bool:
        return self._frontier >= CLOSED

    @property
    def partition_frontiers(self) -> list[int | None]:
        return [None if p.final >= CLOSED else p.final for p in self._partitions]

    @property
    def view(self) -> dict[Any, int]:
        """The collection accumulated over every final time: record -> multiplicity (non-zero)."""
        return dict(self._view)

    # -- reading -----------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.1, *, max_messages: int = 10_000) -> list[Change]:
        """Read what is available (waiting up to ``timeout``); one Change per frontier move."""
        consumer = self._consumer
        if consumer is None:
            raise KafkaError(f"result client for {self.topic!r}: not open (use it as a context manager)")
        try:
            messages = consumer.consume(num_messages=max_messages, timeout=timeout)
        except KafkaException as exc:
            raise KafkaError(f"reading result topic {self.topic!r}: {exc}") from exc
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == RdKafkaError._PARTITION_EOF:
                    self._partitions[msg.partition()].at_end = True
                    continue
                raise KafkaError(f"reading {self.topic}[{msg.partition()}]: {err}")
            self._partitions[msg.partition()].at_end = False
            self._apply(msg.partition(), msg.offset(), msg.value())
        return self._advance()

    def _apply(self, partition: int, offset: int, value: bytes | None) -> None:
        self.stats.messages += 1
        try:
            msg = decode_output(value)
        except Exception as exc:
            raise ProtocolError(f"{self.topic}[{partition}] offset {offset}: {exc}") from exc
        state = self._partitions[partition]
        upper = CLOSED if msg.upper is None else msg.upper
        key = (msg.incarnation, msg.lower, msg.upper)
        if isinstance(msg, OutputBatch):
            if upper <= state.final:
                self.stats.dropped_updates += len(msg.updates)
            else:
                state.pending[key].extend(msg.updates)
            return
        found = state.pending.pop(key, [])
        where = f"{self.topic}[{partition}] offset {offset}: epoch [{msg.lower}, {msg.upper}) of incarnation {msg.incarnation}"
        if upper <= state.final:
            self.stats.duplicate_epochs += 1
            self.stats.dropped_updates += len(found)
            return
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
            return
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
        self._staged.extend(fresh)
        for stale in [k for k in state.pending if (CLOSED if k[2] is None else k[2]) <= upper]:
            self.stats.dropped_updates += len(state.pending.pop(stale))

    def _advance(self) -> list[Change]:
        if not self._partitions:
            return []
        frontier = min(p.final for p in self._partitions)
        if frontier <= self._frontier:
            return []
        self._frontier = frontier
        final = [u for u in self._staged if u[1] < frontier]
        if len(final) < len(self._staged):
            self._staged = [u for u in self._staged if u[1] >= frontier]
        else:
            self._staged = []
        final.sort(key=lambda u: u[1])
        if self.keep_view:
            view = self._view
            for record, _, diff in final:
                count = view.get(record, 0) + diff
                if count:
                    view[record] = count
                else:
                    del view[record]
        return [Change(self.frontier, final)]

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition is at its end; KafkaError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for p in self._partitions:
            p.at_end = False
        while not all(p.at_end for p in self._partitions):
            if time.monotonic() > deadline:
                behind = [i for i, p in enumerate(self._partitions) if not p.at_end]
                raise KafkaError(f"catching up on {self.topic!r}: partitions {behind} not at their end after {timeout} s")
            self.poll(0.1)

    def wait_for(self, frontier: int | None, timeout: float = 30.0) -> bool:
        """Poll until the frontier reaches ``frontier`` (None: until closed); False on timeout."""
        target = CLOSED if frontier is None else frontier
        deadline = time.monotonic() + timeout
        while self._frontier < target:
            if time.monotonic() > deadline:
                return False
            self.poll(0.1)
        return True

    def changes(self, *, timeout: float | None = None, poll_timeout: float = 0.1) -> Iterator[Change]:
        """Iterate changes live; stops when the topic is closed or ``timeout`` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.closed and (deadline is None or time.monotonic() < deadline):
            yield from self.poll(poll_timeout)


def read_final_frontiers(topic: str, kafka_options: Mapping[str, Any], *, timeout: float = 30.0) -> list[int]:
    """Per partition, the frontier the result topic already marks final (MIN_TIME if none)."""
    with ResultClient(topic, kafka_options, keep_view=False) as client:
        client.catch_up(timeout)
        return [p.final for p in client._partitions]
