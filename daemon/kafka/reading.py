"""Reading result topics with one consumer: each message routed to the follower of its topic.

`Routes` knows which follower (`following`) reads which topic and whether every assigned
partition is at its end; `read_once` applies what one consume returns, `catch_up` reads until every
partition is at its end. `follower_of` builds the follower of an output in its format (a msgpack
topic carries its own markers, json and debezium outputs keep them on a companion progress topic).
Used by the live `results.ResultClient` and by a restart's `positions.read_result_positions`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError as RdKafkaError, KafkaException, TopicPartition

from ..exceptions import KafkaClientError, OptionsError, RecoveryError, Stopped
from .client import client_config, read_position, topic_partitions
from .companion import _CompanionFollower, _UpsertFollower
from .following import Change, ProtocolStats, ReadAgain, _Follower, _View

__all__ = [
    "REBUILD", "OutOfRange", "Routes", "assign", "catch_up", "consumer_config", "follower_of", "messages", "read_once",
]

log = logging.getLogger("ddflow.daemon.kafka.reading")


IDLE_REREAD_S = 5.0  # a reader at the end of every partition, frontier held back, reads them again after
IDLE_REREAD_MAX_S = 320.0  # ... this long, doubling up to this while nothing moves


class Routes:
    """Which follower reads which topic; where every assigned partition is (at its end or not).

    ``idle_reread``: seconds a reader stays at the end of every partition before the partitions
    holding a follower's frontier back are read again (`idle`)."""

    def __init__(self, followers: Sequence[_View], idle_reread: float = IDLE_REREAD_S) -> None:
        self.views = list(followers)
        self.counts: dict[str, int] = {}
        self.followers: dict[str, list[_View]] = {}
        for f in followers:
            for topic, count in f.topics().items():
                self.counts[topic] = count
                self.followers.setdefault(topic, []).append(f)
        self.at_end = {(t, p): False for t, n in self.counts.items() for p in range(n)}
        self.last: dict[tuple[str, int], int] = {}  # offset of the last message read per partition
        self.expect: dict[tuple[str, int], int] = {}  # reading resumes at a message recorded there
        self.consumer: Consumer | None = None  # set by `assign`: a follower's `ReadAgain` seeks it
        self.rereading: dict[tuple[str, int], int] = {}  # sought back from the marker at this offset
        self.idle_reread = self.idle_wait = idle_reread
        self.quiet_since: float | None = None  # every partition at its end since, nothing new read

    def take(self, msg: Any) -> list[Change]:
        """Apply one message (not an error); the Changes it caused."""
        topic, partition = msg.topic(), msg.partition()
        offset = msg.offset()
        at = self.rereading.get((topic, partition))
        if at is not None:
            if offset > at:  # fetched before the seek: it comes again
                return []
            del self.rereading[(topic, partition)]
        self.at_end[(topic, partition)] = False
        self.quiet_since = None
        expected = self.expect.pop((topic, partition), None)
        if expected is not None and offset != expected:
            raise RecoveryError(
                f"result topic {topic}[{partition}]: the checkpoint recorded a message at offset {expected}, but "
                f"reading from there found the next one at offset {offset}; was the topic deleted and recreated? "
                f"{REBUILD}"
            )
        self.last[(topic, partition)] = offset
        changes = []
        for follower in self.followers[topic]:
            try:
                change = follower.take(topic, partition, offset, msg.value(), msg.headers(), msg.key())
            except ReadAgain as again:
                if self.consumer is None:
                    raise
                log.warning("%s; reading %s[%d] again from offset %d", again, topic, partition, again.start)
                self._seek(topic, partition, again.start, again.at, str(again))
                return changes
            if change is not None:
                changes.append(change)
                self.idle_wait = self.idle_reread
        return changes

    def idle(self) -> None:
        """A read found nothing new. Once every partition has been at its end for ``idle_wait``
        seconds, the partitions holding a follower's frontier back are read again from just after
        their writers' last accepted markers (`_View.held_back`: a broker that left out a writer's
        last epochs shows no gap until that writer's next marker, which may never come);
        the wait then doubles, up to ``IDLE_REREAD_MAX_S``, until the frontier moves."""
        if self.consumer is None or not all(self.at_end.values()):
            self.quiet_since = None
            return
        now = time.monotonic()
        if self.quiet_since is None:
            self.quiet_since = now
        if now - self.quiet_since < self.idle_wait:
            return
        self.quiet_since, self.idle_wait = None, min(2 * self.idle_wait, IDLE_REREAD_MAX_S)
        wanted: dict[tuple[str, int], tuple[int, list[ProtocolStats]]] = {}  # a shared progress partition:
        for follower in self.views:  # from the least start any of its followers asks for, once
            for topic, partition, start in follower.held_back():
                least, stats = wanted.get((topic, partition), (start, []))
                wanted[(topic, partition)] = (min(least, start), stats + [follower.stats])
        for (topic, partition), (start, stats) in wanted.items():
            last = self.last.get((topic, partition), -1)
            # nothing to read again when the last message read is the last accepted marker
            # and nothing follows it (a transaction's commit marker does: read, it is nothing)
            if start <= last or (read_position(self.consumer, topic, partition) or -1) > last + 1:
                log.debug("%s[%d] holds the frontier back at its end: reading it again from offset %d",
                          topic, partition, start)
                for counted in {id(s): s for s in stats}.values():
                    counted.idle_rereads += 1
                for follower in self.followers[topic]:
                    follower.reading_again(topic, partition)
                self._seek(topic, partition, start, None, "idle at its end")

    def _seek(self, topic: str, partition: int, start: int, at: int | None, why: str) -> None:
        """Read ``topic[partition]`` again from ``start``; with ``at``, what the consume that
        asked for it returned after offset ``at`` is skipped (it comes again after ``start``)."""
        assert self.consumer is not None
        try:
            self.consumer.seek(TopicPartition(topic, partition, start))
        except KafkaException as exc:
            raise KafkaClientError(f"reading {topic}[{partition}] again from offset {start} ({why}): {exc}") from exc
        if at is not None:
            self.rereading[(topic, partition)] = at
        self.at_end[(topic, partition)] = False


def consumer_config(kafka_options: Mapping[str, Any], consumer_options: Mapping[str, Any] | None, *,
                    isolation: str = "read_committed") -> dict[str, Any]:
    """The config of a consumer of result topics. ``isolation``: ``read_committed`` for a
    restarting sink (what it finds final it does not publish again, so an aborted epoch must not
    count: a consumer reading committed records only would never get it); a `results.ResultClient`
    reads ``read_uncommitted`` (see there)."""
    role = {
        "group.id": f"ddflow-results-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
    }
    config = client_config({**kafka_options, **(consumer_options or {})}, role, who="result client")
    config.setdefault("fetch.wait.max.ms", 100)
    config.setdefault("auto.offset.reset", "earliest")
    return config


REBUILD = ("Its history is not what this daemon published: restore with an empty checkpoint directory (and empty "
            "result topics) to rebuild it")

OutOfRange = Callable[[str, int], None]


def messages(
    consumer: Consumer, routes: Routes, timeout: float, max_messages: int, out_of_range: OutOfRange | None = None
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
    if all(msg.error() is not None for msg in messages):
        routes.idle()


def read_once(consumer: Consumer, routes: Routes, timeout: float, max_messages: int,
          out_of_range: OutOfRange | None = None) -> tuple[list[Change], int]:
    """Apply what one consume returns: the changes, and how many messages were read."""
    changes, read = [], 0
    for msg in messages(consumer, routes, timeout, max_messages, out_of_range):
        read += 1
        changes.extend(routes.take(msg))
    return changes, read


def catch_up(
    consumer: Consumer,
    routes: Routes,
    timeout: float,
    *,
    out_of_range: OutOfRange | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Read until every partition is at its end; KafkaClientError when ``timeout`` seconds pass without
    a message while some partition is not (a long topic takes as long as it takes). ``stop``: asked
    before every read (at most 10,000 messages, or 50 ms without one); once it returns True the
    read ends with `Stopped` (what was read is dropped: a caller reads again from the start)."""
    deadline = clock() + timeout
    read = 0
    # at_end is set by the consumer's end-of-partition event and cleared by every message; the
    # event comes once per arrival at the end, so it is not reset here
    while not all(routes.at_end.values()):
        if stop is not None and stop():
            behind = [f"{t}[{p}]" for (t, p), done in routes.at_end.items() if not done]
            shown = ", ".join(behind[:5]) + (f" and {len(behind) - 5} more" if len(behind) > 5 else "")
            raise Stopped(f"stopped while reading result topics {sorted(routes.counts)} back: {read} messages read, "
                          f"{shown} not at their end yet; the next start reads them again")
        if clock() > deadline:
            behind = [f"{t}[{p}]" for (t, p), done in routes.at_end.items() if not done]
            raise KafkaClientError(f"catching up on result topics: {behind} not at their end, nothing read for {timeout} s")
        _, count = read_once(consumer, routes, 0.05, 10_000, out_of_range)
        read += count
        if count:
            deadline = clock() + timeout


def assign(consumer: Consumer, routes: Routes, start: Mapping[tuple[str, int], int] | None = None) -> None:
    # offset 0 (not OFFSET_BEGINNING): librdkafka waits ~0.5 s before resolving a logical offset;
    # auto.offset.reset=earliest covers topics whose start was deleted
    assignment = [TopicPartition(t, p, (start or {}).get((t, p), 0)) for t, p in routes.at_end]
    try:
        consumer.assign(assignment)
    except KafkaException as exc:
        raise KafkaClientError(f"assigning result topics {sorted(routes.counts)}: {exc}") from exc
    routes.consumer = consumer
    for tp in assignment:
        for follower in routes.followers[tp.topic]:
            follower.reading_from(tp.topic, tp.partition, tp.offset)


def follower_of(topic: str, kafka_options: Mapping[str, Any], *, format: str, progress_topic: str | None,
              fields: Sequence[str] | Mapping[str, str] | None, keep_view: bool, stats: ProtocolStats,
              mode: str = "changelog") -> _View:
    """The follower of output ``topic`` in ``format`` (partition counts read from the broker);
    ``mode``: a json output's, ``changelog`` or ``upsert`` (a table, see `companion._UpsertFollower`)."""
    count = topic_partitions(kafka_options, topic)
    if format == "msgpack":
        if progress_topic is not None:
            raise OptionsError(f"result client for {topic!r}: a msgpack output keeps its markers in its own topic "
                               "(progress_topic is for json and debezium outputs)")
        return _Follower(topic, count, keep_view=keep_view, stats=stats)
    from ..formats import reader

    if progress_topic is None:
        raise OptionsError(f"result client for {topic!r}: a {format} output needs its progress_topic")
    if mode not in ("changelog", "upsert") or (mode == "upsert" and format != "json"):
        raise OptionsError(f"result client for {topic!r}: mode {mode!r} (a {format} output); expected 'changelog', "
                           "or 'upsert' for a json output")
    follower = _UpsertFollower if mode == "upsert" else _CompanionFollower
    return follower(topic, count, progress_topic, topic_partitions(kafka_options, progress_topic),
                    reader(format, fields), keep_view=keep_view, stats=stats)
