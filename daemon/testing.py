"""In-memory doubles of the worker's source and sink, to test dataflows and epochs without a broker.

`ReplaySource` is a `KafkaSource` whose topics are in-memory logs: every message a test `send`\\ s
is decoded, validated, dead-lettered, judged late and tracked for progress by the same code that
reads Kafka, only the consumer is replaced (as ``httpx.MockTransport`` replaces the network).
`ListSink` keeps each published epoch, the committed input offsets and the dead letters in lists::

    from ddflow.daemon import EpochPolicy, InputSpec, Worker
    from ddflow.daemon.testing import ListSink, ReplaySource

    sink = ListSink(["counts"])
    source = ReplaySource([InputSpec("views", "views", fields=["user", "page"])], dead_letters=sink.dead_letters)
    source.send_updates("views", [(("ann", "/a"), 5, 1), (("bob", "/a"), 7, 1)])
    source.advance_to("views", 10)
    worker = Worker(lambda df, i: {"counts": i["views"].map(lambda r: r[1]).count()}, source, sink,
                    epochs=EpochPolicy(resolution_ns=10))
    worker.run(until=10, timeout=5)
    assert sink.view("counts") == {("/a", 2): 1}

What a caller may assume: ``sink.epochs`` holds the committed epochs in order, each with the
updates per output exactly as the worker published them; ``sink.committed`` the input offsets
committed with the last epoch; ``sink.dead`` the committed dead letters (`deadletter.DeadLetter`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError as RdKafkaError

from ..operators.lattice import T_MIN
from .block import Block
from .deadletter import DeadLetter, DeadLetterWriter, decode_dead_letter
from .exceptions import OptionsError
from .formats.msgpack import encode_progress, encode_updates
from .input.progress import ReclockClock
from .input.source import InputSpec, KafkaSource
from .io import Offsets, Update
from .observe.stats import Stats
from .output.commits import CommitWindow, Committer, Window, WindowCommits
from .output.sink import OutputSpec

__all__ = ["ReplaySource", "ListSink", "Epoch"]


class _EndOfPartition:
    """What librdkafka reports when a consumer reached the end of a partition."""

    def code(self) -> int:
        return RdKafkaError._PARTITION_EOF

    def fatal(self) -> bool:
        return False


@dataclass(frozen=True)
class _Message:
    """One message as a confluent-kafka consumer returns it."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _timestamp_ms: int
    _error: _EndOfPartition | None = None

    def error(self) -> _EndOfPartition | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return None  # `ReplaySource.send` takes values only

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp_ms)  # TIMESTAMP_CREATE_TIME


class _Cursor:
    """The in-memory consumer's assignment: the next offset to read per (topic, partition)."""

    def __init__(self, positions: dict[tuple[str, int], int]) -> None:
        self.positions = positions
        self.at_end: set[tuple[str, int]] = set()  # partitions that reported their end since the last message
        self.paused: set[tuple[str, int]] = set()  # partitions not read for now
        self.turn = -1  # where the last poll started

    def close(self) -> None:
        self.positions = {}


class ReplaySource(KafkaSource):
    """A `KafkaSource` over in-memory topics (an `io.Source`).

    ``partitions``: the number of partitions of every input topic, or topic -> number; ``worker``:
    ``(i, W)`` reads the partitions ``p % W == i`` of each (see `KafkaSource`). Messages
    are appended with `send` (raw bytes, e.g. malformed ones), `send_updates` and `advance_to`
    (msgpack inputs), before or while a worker runs (thread-safe). A poll returns what was sent
    and not read yet, one message per partition in turn, then an end-of-partition event per partition
    that reached its end (as Kafka does with ``enable.partition.eof``); with nothing new it waits
    up to its timeout for a `send`.
    """

    def __init__(
        self,
        inputs: Sequence[InputSpec],
        *,
        partitions: int | Mapping[str, int] = 1,
        dead_letters: DeadLetterWriter | None = None,
        stats: Stats | None = None,
        clock: ReclockClock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        worker: tuple[int, int] = (0, 1),
    ) -> None:
        super().__init__(inputs, {}, dead_letters=dead_letters, stats=stats, clock=clock, monotonic=monotonic,
                         worker=worker)
        self._by_name = {i.name: i.topic for i in inputs}
        self._logs: dict[str, list[list[tuple[bytes | None, int]]]] = {}
        for i in inputs:
            count = partitions if isinstance(partitions, int) else partitions.get(i.topic, 1)
            if type(count) is not int or count <= 0:
                raise OptionsError(f"ReplaySource partitions of {i.topic!r}: expected a positive int, got {count!r}")
            self._logs[i.topic] = [[] for _ in range(count)]
        self._changed = threading.Condition()

    @staticmethod
    def _client_config(*_: Any) -> dict[str, Any]:
        return {}

    # -- writing the topics ----------------------------------------------------------------------

    def topic_of(self, input: str) -> str:
        """The topic of the input named ``input`` (or ``input`` itself if it is a topic)."""
        if input in self._logs:
            return input
        if input not in self._by_name:
            raise OptionsError(f"ReplaySource: no input or topic named {input!r}")
        return self._by_name[input]

    def send(self, input: str, value: bytes | None, *, partition: int = 0, timestamp_ms: int | None = None) -> int:
        """Append the message ``value`` to ``partition`` of the input's topic; returns its offset."""
        log = self._logs[self.topic_of(input)]
        if not 0 <= partition < len(log):
            raise OptionsError(f"ReplaySource: {input!r} has no partition {partition} (it has {len(log)})")
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        with self._changed:
            log[partition].append((value, stamp))
            self._changed.notify_all()
            return len(log[partition]) - 1

    def send_updates(self, input: str, updates: Iterable[Update], *, partition: int = 0) -> int:
        """One msgpack message holding ``updates`` ``(data, time, diff)``; returns its offset."""
        return self.send(input, encode_updates(updates), partition=partition)

    def advance_to(self, input: str, time: int, *, partitions: Iterable[int] | None = None) -> None:
        """A progress marker ``time`` on each of ``partitions`` (default: every partition)."""
        log = self._logs[self.topic_of(input)]
        for p in range(len(log)) if partitions is None else partitions:
            self.send(input, encode_progress(time), partition=p)

    def messages(self, input: str, partition: int = 0) -> int:
        """How many messages ``partition`` of the input's topic holds."""
        return len(self._logs[self.topic_of(input)][partition])

    # -- the transport ---------------------------------------------------------------------------

    def _partition_count(self, topic: str) -> int:
        return len(self._logs[topic])

    def _assign(self, assignment: list[Any]) -> _Cursor:
        return _Cursor({(tp.topic, tp.partition): max(tp.offset, 0) for tp in assignment})

    def _consume(self, max_messages: int, timeout: float) -> list[Any]:
        cursor: _Cursor = self.consumer
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                out = self._take(cursor, max_messages)
                left = deadline - time.monotonic()
                if out or left <= 0:
                    return out
                self._changed.wait(left)

    def _take(self, cursor: _Cursor, max_messages: int) -> list[Any]:
        """Up to ``max_messages``, one message per partition in turn (fetches interleave), then an
        end-of-partition event for each partition that reached its end."""
        out: list[Any] = []
        keys = sorted(key for key in cursor.positions if key not in cursor.paused)
        if keys:  # each poll starts at the next partition, so none starves under max_messages
            cursor.turn = (cursor.turn + 1) % len(keys)
            keys = keys[cursor.turn:] + keys[:cursor.turn]
        moved = True
        while moved and len(out) < max_messages:
            moved = False
            for key in keys:
                offset = cursor.positions[key]
                log = self._logs[key[0]][key[1]]
                if offset < len(log) and len(out) < max_messages:
                    value, stamp = log[offset]
                    out.append(_Message(key[0], key[1], offset, value, stamp))
                    cursor.positions[key] = offset + 1
                    cursor.at_end.discard(key)
                    moved = True
        for key in keys:
            if len(out) < max_messages and key not in cursor.at_end and \
                    cursor.positions[key] >= len(self._logs[key[0]][key[1]]):
                cursor.at_end.add(key)
                out.append(_Message(key[0], key[1], cursor.positions[key], None, 0, _EndOfPartition()))
        return out

    def _pause(self, partitions: list[tuple[str, int]]) -> None:
        self.consumer.paused.update(partitions)

    def _resume(self, partitions: list[tuple[str, int]]) -> None:
        self.consumer.paused.difference_update(partitions)

    def _high_watermark(self, topic: str, partition: int) -> int | None:
        return len(self._logs[topic][partition])

    def _position(self, topic: str, partition: int) -> int | None:
        return None  # no transaction markers: the next offset is the last message's + 1

    def _committed(self, assignment: list[Any]) -> dict[tuple[str, int], int]:
        return {}  # no consumer group: every dead letter is written


@dataclass(frozen=True)
class Epoch:
    """One committed epoch ``[lower, upper)`` (upper None: final forever) and its updates per output;
    ``snapshot``: it published the contents of the snapshot the worker started from."""

    lower: int
    upper: int | None
    updates: dict[str, list[Update]]
    offsets: dict[tuple[str, int], int]
    snapshot: bool = False


class ListSink(WindowCommits):
    """A sink keeping what it commits in lists (an `io.Sink`).

    ``outputs``: `OutputSpec`\\ s or output names; ``dead_letter_topic`` None: no dead letters
    (bad input is counted and dropped, as with a Kafka worker without a dead-letter topic).
    ``commit_interval``: as `sink.KafkaSink`'s (`commits.CommitWindow`): published epochs reach
    ``epochs`` when their commit lands. Commits run in the worker's thread, so a test sees each
    one land as it happens; with ``background=True`` they run in a thread of their own while the
    worker computes the next epochs, as the Kafka sink's do: ``gate`` set to an unset
    `threading.Event` then makes a commit wait until it is set (a slow broker). ``fail_next`` set
    to an exception makes the next commit raise it and commit nothing. ``transactions`` lists, per commit that
    landed, the ``(lower, upper)`` of its epochs.
    """

    def __init__(self, outputs: Sequence[OutputSpec | str], *, dead_letter_topic: str | None = "dead-letters",
                 stats: Stats | None = None, commit_interval: float = 0.0, background: bool = False) -> None:
        if not outputs:
            raise OptionsError("ListSink: no outputs given")
        self.outputs = [o if isinstance(o, OutputSpec) else OutputSpec(o, o) for o in outputs]
        self.stats = stats or Stats()
        for o in self.outputs:
            self.stats.output(o.name)
        self.incarnation = "memory"
        self.epochs: list[Epoch] = []
        self.committed: dict[tuple[str, int], int] = {}
        self.dead: list[DeadLetter] = []
        self.transactions: list[list[tuple[int, int | None]]] = []
        self.fail_next: BaseException | None = None
        self.gate: threading.Event | None = None
        self.commits = 0  # commits that landed (epochs, dead letters or both)
        self._window = CommitWindow(commit_interval)
        self._commits = Committer("ddflow-list-commit", background=background)
        self._inflight = 0  # epochs in the commit in flight
        self.opened = self.closed = 0
        self._staged: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = []
        self._staged_since: float | None = None
        self.dead_letters = DeadLetterWriter(dead_letter_topic, self._stage, stats=self.stats) if dead_letter_topic else None

    def open(self, resume: Mapping[str, Any] | None = None, *, stop: Callable[[], bool] | None = None) -> None:
        self.opened += 1

    def positions(self) -> dict[str, Any]:
        """What a checkpoint records of the outputs (nothing to resume from: a restarted worker
        publishes its outputs again, from the checkpoint's epoch on)."""
        return {"frontier": self.frontier, "finals": {}, "starts": {}}

    def close(self) -> None:
        if self._commits.busy:
            try:
                self._commits.result(timeout=60)
            except Exception:  # the worker failed already; this commit's failure is not the news
                pass
        self.closed += 1

    def _stage(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        if self._staged_since is None:
            self._staged_since = time.monotonic()
        self._staged.append((key, value, headers))

    def staged_for(self) -> float:
        return 0.0 if self._staged_since is None else time.monotonic() - self._staged_since

    def commit_dead_letters(self) -> None:
        if self._staged:
            self.commit()

    def _start(self) -> None:
        window = self._window.take()
        window.extra["staged"], self._staged, self._staged_since = self._staged, [], None
        self._inflight = window.epochs

        gate = self.gate  # the gate set when the commit starts holds it

        def commit() -> Window:  # in the committer's thread: waits for the gate, may fail
            if gate is not None:
                gate.wait()
            if self.fail_next is not None:
                error, self.fail_next = self.fail_next, None
                raise error
            return window

        self._commits.start(commit)

    def _collect(self) -> bool:
        window = self._commits.result()
        self._inflight = 0
        self.dead.extend(decode_dead_letter(v, h, k) for k, v, h in window.extra["staged"])
        for epoch in window.items:
            self.epochs.append(epoch)
            self.committed.update(epoch.offsets)
            for name, ups in epoch.updates.items():
                ostats = self.stats.output(name)
                ostats.updates += len(ups)
                ostats.frontier = epoch.upper
        if window.items:
            self.transactions.append([(e.lower, e.upper) for e in window.items])
        self.commits += 1
        return True

    def pending(self) -> int:
        return self._window.epochs + self._inflight

    def publish(self, lower: int, upper: int | None, updates: Mapping[str, Block | Sequence[Update]], *,
                offsets: Offsets | None = None, snapshot: bool = False) -> dict[str, int]:
        names = {o.name for o in self.outputs}
        unknown = set(updates) - names
        if unknown:
            raise OptionsError(f"publishing epoch [{lower}, {upper}): unknown outputs {sorted(unknown)}")
        rows = {n: ups.rows() if isinstance(ups, Block) else list(ups) for n, ups in updates.items()}
        epoch = Epoch(lower, upper, {n: rows.get(n, []) for n in names}, dict(offsets or {}), snapshot)
        self._window.add(lower, upper, [epoch], offsets)
        self.maybe_commit()
        return {name: len(ups) for name, ups in epoch.updates.items()}

    @property
    def frontier(self) -> int | None:
        """The upper of the last committed epoch (None before the first)."""
        return self.epochs[-1].upper if self.epochs else None

    @property
    def committed_upper(self) -> int | None:
        """The upper of the last committed epoch (T_MIN before the first, None: closed for good)."""
        return self.epochs[-1].upper if self.epochs else T_MIN

    def view(self, output: str, at: int | None = None) -> dict[Any, int]:
        """The output's collection: every committed update at a time before ``at`` (default: all),
        consolidated to record -> count (records with count 0 left out)."""
        counts: dict[Any, int] = defaultdict(int)
        for epoch in self.epochs:
            for record, t, diff in epoch.updates.get(output, ()):
                if at is None or t < at:
                    counts[record] += diff
        return {r: c for r, c in counts.items() if c != 0}
