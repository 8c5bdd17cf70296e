"""The result-topic client: follow the output protocol, keep the accumulated collection.

A result topic holds, per partition, batches of updates naming their epoch ``[lower, upper)``
and writer incarnation, and progress markers ``(lower, upper, incarnation, count)`` (see `formats.result_protocol`
and `sink`); a topic written by ``W`` workers has every partition marked by each of them, and a
range is final once all ``W`` writers marked it. The client follows that protocol per partition (`following`): an epoch counts once
however often it was written; re-sent epochs, broker retries, and records of aborted transactions
(shown by brokers that do not hide them) are dropped - the latter never get a marker of their own,
or carry exactly the deterministic output when they do.

The topic's frontier is the minimum over partitions. `view` is the collection accumulated over
every time below it; only complete times are ever visible. `poll` returns a `Change` each time
the frontier moves, with the updates that became final; `changes()` iterates them live.

Outputs in the json and debezium formats keep their markers on a companion progress topic (see
`formats.rows`): each data message names its epoch and incarnation in a header, and a marker
names its data partition and the number of data messages. The client reads both topics; as the
two are not read in step, a marker waits until that many data messages of its incarnation and
range have been read (`_CompanionFollower`), then the same rules apply.

`read_result_positions` tells a restarting daemon the final frontier of every partition, and
where reading may resume later: the offset of the last message read (or written, see `sink`) on
each partition. Given the positions its checkpoint recorded it reads only from there - each must
still hold a message, or the topic was recreated and is refused - so a restart costs what was
published since the checkpoint, not the topics' whole history.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError as RdKafkaError, KafkaException, TopicPartition

from ...operators.lattice import T_MIN
from ..exceptions import KafkaClientError, OptionsError, RecoveryError
from .client import client_config, topic_partitions
from .following import CLOSED, Change, ProtocolStats, _CompanionFollower, _Follower, _View

__all__ = ["Change", "ResultClient", "read_final_frontiers", "read_result_positions", "CLOSED"]

class _Routes:
    """Which follower reads which topic; where every assigned partition is (at its end or not)."""

    def __init__(self, followers: Sequence[_View]) -> None:
        self.counts: dict[str, int] = {}
        self.followers: dict[str, list[_View]] = {}
        for f in followers:
            for topic, count in f.topics().items():
                self.counts[topic] = count
                self.followers.setdefault(topic, []).append(f)
        self.at_end = {(t, p): False for t, n in self.counts.items() for p in range(n)}
        self.last: dict[tuple[str, int], int] = {}  # offset of the last message read per partition
        self.expect: dict[tuple[str, int], int] = {}  # reading resumes at a message recorded there

    def take(self, msg: Any) -> list[Change]:
        """Apply one message (not an error); the Changes it caused."""
        topic, partition = msg.topic(), msg.partition()
        self.at_end[(topic, partition)] = False
        offset = msg.offset()
        expected = self.expect.pop((topic, partition), None)
        if expected is not None and offset != expected:
            raise RecoveryError(
                f"result topic {topic}[{partition}]: the checkpoint recorded a message at offset {expected}, but "
                f"reading from there found the next one at offset {offset}; was the topic deleted and recreated? "
                f"{_REBUILD}"
            )
        self.last[(topic, partition)] = offset
        changes = []
        for follower in self.followers[topic]:
            change = follower.take(topic, partition, msg.offset(), msg.value(), msg.headers())
            if change is not None:
                changes.append(change)
        return changes


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


_REBUILD = ("Its history is not what this daemon published: restore with an empty checkpoint directory (and empty "
            "result topics) to rebuild it")

OutOfRange = Callable[[str, int], None]


def _messages(
    consumer: Consumer, routes: _Routes, timeout: float, max_messages: int, out_of_range: OutOfRange | None = None
) -> Iterator[Any]:
    """The messages of one read, end-of-partition events recorded and left out;
    ``out_of_range(topic, partition)`` handles a start offset the partition does not hold. Waits
    at most ``timeout`` seconds for the first message only, then takes what the consumer already
    holds (up to ``max_messages``): librdkafka's own batch call would wait the whole ``timeout``
    for ``max_messages``, which a marker that just became final would sit through."""
    try:
        messages = consumer.consume(num_messages=max_messages, timeout=0)
        if not messages and timeout > 0:
            messages = consumer.consume(num_messages=1, timeout=timeout)
            if messages and max_messages > 1:
                messages += consumer.consume(num_messages=max_messages - 1, timeout=0)
    except KafkaException as exc:
        raise KafkaClientError(f"reading result topics {sorted(routes.counts)}: {exc}") from exc
    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.code() == RdKafkaError._PARTITION_EOF:
                routes.at_end[(msg.topic(), msg.partition())] = True
                continue
            if out_of_range is not None and err.code() in (RdKafkaError._AUTO_OFFSET_RESET,
                                                           RdKafkaError.OFFSET_OUT_OF_RANGE):
                out_of_range(msg.topic(), msg.partition())
                continue
            raise KafkaClientError(f"reading {msg.topic()}[{msg.partition()}]: {err}")
        yield msg


def _read(consumer: Consumer, routes: _Routes, timeout: float, max_messages: int,
          out_of_range: OutOfRange | None = None) -> tuple[list[Change], int]:
    """Apply what one consume returns: the changes, and how many messages were read."""
    changes, read = [], 0
    for msg in _messages(consumer, routes, timeout, max_messages, out_of_range):
        read += 1
        changes.extend(routes.take(msg))
    return changes, read


def _catch_up(
    consumer: Consumer,
    routes: _Routes,
    timeout: float,
    *,
    out_of_range: OutOfRange | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Read until every partition is at its end; KafkaClientError when ``timeout`` seconds pass without
    a message while some partition is not (a long topic takes as long as it takes)."""
    deadline = clock() + timeout
    # at_end is set by the consumer's end-of-partition event and cleared by every message; the
    # event comes once per arrival at the end, so it is not reset here
    while not all(routes.at_end.values()):
        if clock() > deadline:
            behind = [f"{t}[{p}]" for (t, p), done in routes.at_end.items() if not done]
            raise KafkaClientError(f"catching up on result topics: {behind} not at their end, nothing read for {timeout} s")
        _, read = _read(consumer, routes, 0.05, 10_000, out_of_range)
        if read:
            deadline = clock() + timeout


def _assign(consumer: Consumer, routes: _Routes, start: Mapping[tuple[str, int], int] | None = None) -> None:
    # offset 0 (not OFFSET_BEGINNING): librdkafka waits ~0.5 s before resolving a logical offset;
    # auto.offset.reset=earliest covers topics whose start was deleted
    assignment = [TopicPartition(t, p, (start or {}).get((t, p), 0)) for t, p in routes.at_end]
    try:
        consumer.assign(assignment)
    except KafkaException as exc:
        raise KafkaClientError(f"assigning result topics {sorted(routes.counts)}: {exc}") from exc


def _follower(topic: str, kafka_options: Mapping[str, Any], *, format: str, progress_topic: str | None,
              fields: Sequence[str] | Mapping[str, str] | None, keep_view: bool, stats: ProtocolStats) -> _View:
    """The follower of output ``topic`` in ``format`` (partition counts read from the broker)."""
    count = topic_partitions(kafka_options, topic)
    if format == "msgpack":
        if progress_topic is not None:
            raise OptionsError(f"result client for {topic!r}: a msgpack output keeps its markers in its own topic "
                               "(progress_topic is for json and debezium outputs)")
        return _Follower(topic, count, keep_view=keep_view, stats=stats)
    from ..formats import reader

    if progress_topic is None:
        raise OptionsError(f"result client for {topic!r}: a {format} output needs its progress_topic")
    return _CompanionFollower(topic, count, progress_topic, topic_partitions(kafka_options, progress_topic),
                              reader(format, fields), keep_view=keep_view, stats=stats)


class ResultClient:
    """Consume a result topic from the beginning and maintain the final accumulated view.

    ``format``: the output's format; a ``json`` or ``debezium`` output also needs its
    ``progress_topic``, and ``fields`` (the output's field names, or name -> type to read
    ``bytes`` fields back from base64) gives the order of a record's values (default: each row's
    own order). A record with one field is its value, with several a tuple."""

    def __init__(
        self,
        topic: str,
        kafka_options: Mapping[str, Any],
        *,
        format: str = "msgpack",
        progress_topic: str | None = None,
        fields: Sequence[str] | Mapping[str, str] | None = None,
        consumer_options: Mapping[str, Any] | None = None,
        keep_view: bool = True,
    ) -> None:
        from ..formats import FORMATS

        if format not in FORMATS:
            raise OptionsError(f"result client format: {format!r} is not one of {', '.join(FORMATS)}")
        self.topic = topic
        self.format = format
        self.progress_topic = progress_topic
        self.fields = fields
        self.keep_view = keep_view
        self._kafka_options = dict(kafka_options)
        self._config = _consumer_config(kafka_options, consumer_options)
        self._consumer: Consumer | None = None
        self.stats = ProtocolStats()
        self._follower: _View = _Follower(topic, 0, keep_view=keep_view, stats=self.stats)
        self._routes = _Routes([])

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> ResultClient:
        self._follower = _follower(self.topic, self._kafka_options, format=self.format,
                                   progress_topic=self.progress_topic, fields=self.fields, keep_view=self.keep_view,
                                   stats=self.stats)
        self._routes = _Routes([self._follower])
        self._consumer = Consumer(self._config)
        _assign(self._consumer, self._routes)
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
            raise KafkaClientError(f"result client for {self.topic!r}: not open (use it as a context manager)")
        return self._consumer

    def poll(self, timeout: float = 0.1, *, max_messages: int = 10_000) -> list[Change]:
        """Read what is available (waiting up to ``timeout``); one Change per frontier move."""
        return _read(self._require(), self._routes, timeout, max_messages)[0]

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition is at its end; KafkaClientError after ``timeout`` seconds without
        a message."""
        _catch_up(self._require(), self._routes, timeout)

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
        for msg in _messages(consumer, self._routes, timeout, 10_000):
            yield from self._routes.take(msg)


def read_final_frontiers(
    topics: Sequence[str],
    kafka_options: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    formats: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, list[int]]:
    """Per topic and partition, the frontier the result topic already marks final (T_MIN if
    none; `CLOSED` if closed), read from the beginning. ``formats``: topic -> (format, progress
    topic) of the json and debezium outputs among ``topics``."""
    return read_result_positions(topics, kafka_options, timeout=timeout, formats=formats)[0]


def read_result_positions(
    topics: Sequence[str],
    kafka_options: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    formats: Mapping[str, tuple[str, str]] | None = None,
    finals: Mapping[str, Sequence[int]] | None = None,
    starts: Mapping[tuple[str, int], int] | None = None,
    stats: ProtocolStats | None = None,
    writer: int | None = None,
) -> tuple[dict[str, list[int]], dict[tuple[str, int], int]]:
    """Per topic, the final frontier of each partition (T_MIN if none, `CLOSED` if closed), and
    per (topic, partition) read - the result topics and the progress topics of json/debezium
    outputs - the offset of the last message there (none if empty). One consumer reads every topic
    to its end (``timeout``: seconds without a message before giving up).

    ``finals`` and ``starts``: what an earlier call (or the sink since) recorded, as a checkpoint
    keeps it: the partitions start with those final frontiers and are read from those offsets,
    each of which must still hold a message. A topic whose partition count changed, or that no
    longer holds a recorded message (recreated), raises `RecoveryError`; one whose start was
    deleted by retention is read from its first offset. ``stats`` counts what was read.
    ``writer``: the frontiers (and ``finals``) are that writer's, not every writer's (a sink of one
    of several workers resumes from what it published itself)."""
    stats = stats if stats is not None else ProtocolStats()
    followers = {}
    for t in topics:
        format, progress = (formats or {}).get(t, ("msgpack", None))
        followers[t] = _follower(t, kafka_options, format=format, progress_topic=progress, fields=None,
                                 keep_view=False, stats=stats)
        followers[t].only = writer  # other writers' epochs need not be read whole (nor from their start)
    routes = _Routes(list(followers.values()))
    for topic, recorded in (finals or {}).items():
        follower = followers.get(topic)
        if follower is None:
            continue
        if len(recorded) != len(follower.partitions):
            raise RecoveryError(
                f"result topic {topic}: the checkpoint recorded {len(recorded)} partitions, the topic now has "
                f"{len(follower.partitions)}; records no longer land on the partitions that hold their history. "
                f"{_REBUILD}"
            )
        for state, final in zip(follower.partitions, recorded):
            if writer is None:
                state.final = final
            else:
                state.set_writer_final(writer, final)
        follower.frontier = min(recorded, default=T_MIN)
    offsets = {key: at for key, at in (starts or {}).items() if key in routes.at_end and at >= 0}
    recorded = dict(offsets)
    config = _consumer_config(kafka_options, None)
    config["auto.offset.reset"] = "error"  # out-of-range starts are told apart below
    consumer = Consumer(config)

    def watermarks(topic: str, partition: int) -> tuple[int, int]:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        except KafkaException as exc:
            raise KafkaClientError(f"reading the offsets of result topic {topic}[{partition}]: {exc}") from exc
        return low, high

    def recreated(topic: str, partition: int, why: str) -> RecoveryError:
        return RecoveryError(f"result topic {topic}[{partition}]: the checkpoint recorded a message at offset "
                             f"{offsets.get((topic, partition), 0)}, but {why}; was the topic deleted and recreated? "
                             f"{_REBUILD}")

    def out_of_range(topic: str, partition: int) -> None:
        low, high = watermarks(topic, partition)
        if low <= offsets.get((topic, partition), 0):
            raise recreated(topic, partition, f"the partition holds offsets {low}..{high - 1}")
        routes.expect.pop((topic, partition), None)  # retention deleted it: read what is left
        recorded.pop((topic, partition), None)
        try:
            consumer.seek(TopicPartition(topic, partition, low))
        except KafkaException as exc:
            raise KafkaClientError(f"reading result topic {topic}[{partition}] from offset {low}: {exc}") from exc

    try:
        for (topic, p), at in list(offsets.items()):
            low, high = watermarks(topic, p)
            if high <= 0 < at:  # empty (a broker may under-report a high watermark, never to 0)
                raise recreated(topic, p, "the partition is empty")
            if low > at:  # retention deleted it: read what is left
                offsets[(topic, p)] = low
                del recorded[(topic, p)]
            else:
                routes.expect[(topic, p)] = at
        _assign(consumer, routes, offsets)
        try:
            _catch_up(consumer, routes, timeout, out_of_range=out_of_range)
        except KafkaClientError as exc:
            if routes.expect:
                (topic, p), _ = next(iter(routes.expect.items()))
                raise recreated(topic, p, f"nothing could be read there ({exc})") from exc
            raise
    finally:
        consumer.close()
    last = {**recorded, **routes.last}  # offsets that hold a message (none where nothing was read)
    return {t: [p.final if writer is None else p.writer_final(writer) for p in f.partitions]
            for t, f in followers.items()}, last
