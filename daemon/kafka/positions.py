"""Where a restarting daemon's result topics stand: the final frontier per partition, and where
reading may resume.

`read_result_positions` tells a restarting daemon the final frontier of every partition, and
where reading may resume later: the offset of the last message read (or written, see `sink`) on
each partition. Given the positions its checkpoint recorded it reads only from there - each must
still hold a message, or the topic was recreated and is refused - so a restart costs what was
published since the checkpoint, not the topics' whole history.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from ...operators.lattice import T_MIN
from ..exceptions import KafkaClientError, RecoveryError
from .following import ProtocolStats
from .reading import REBUILD, Routes, assign, catch_up, consumer_config, follower_of

__all__ = ["read_final_frontiers", "read_result_positions"]

log = logging.getLogger("ddflow.daemon.kafka.positions")


def read_final_frontiers(
    topics: Sequence[str],
    kafka_options: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    formats: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, list[int]]:
    """Per topic and partition, the frontier the result topic already marks final (T_MIN if
    none; `CLOSED` if closed), read from the beginning. ``formats``: topic -> (format, progress
    topic[, json mode]) of the json and debezium outputs among ``topics``."""
    return read_result_positions(topics, kafka_options, timeout=timeout, formats=formats)[0]


def read_result_positions(
    topics: Sequence[str],
    kafka_options: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    formats: Mapping[str, tuple[str, ...]] | None = None,
    finals: Mapping[str, Sequence[int]] | None = None,
    starts: Mapping[tuple[str, int], int] | None = None,
    stats: ProtocolStats | None = None,
    writer: int | None = None,
    stop: Callable[[], bool] | None = None,
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
    of several workers resumes from what it published itself). ``stop``: a stop request, asked
    between reads; once it returns True the read ends with `Stopped` (nothing is returned: the
    next start reads again)."""
    stats = stats if stats is not None else ProtocolStats()
    followers = {}
    for t in topics:
        format, progress, *mode = (formats or {}).get(t, ("msgpack", None))
        followers[t] = follower_of(t, kafka_options, format=format, progress_topic=progress, fields=None,
                                 keep_view=False, stats=stats, mode=mode[0] if mode else "changelog")
        followers[t].only = writer  # other writers' epochs need not be read whole (nor from their start)
    routes = Routes(list(followers.values()))
    for topic, recorded in (finals or {}).items():
        follower = followers.get(topic)
        if follower is None:
            continue
        if len(recorded) != len(follower.partitions):
            raise RecoveryError(
                f"result topic {topic}: the checkpoint recorded {len(recorded)} partitions, the topic now has "
                f"{len(follower.partitions)}; records no longer land on the partitions that hold their history. "
                f"{REBUILD}"
            )
        for state, final in zip(follower.partitions, recorded):
            if writer is None:
                state.final = final
            else:
                state.set_writer_final(writer, final)
        follower.frontier = min(recorded, default=T_MIN)
    offsets = {key: at for key, at in (starts or {}).items() if key in routes.at_end and at >= 0}
    recorded = dict(offsets)
    config = consumer_config(kafka_options, None)
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
                             f"{REBUILD}")

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
            low, _ = watermarks(topic, p)  # the high watermark is not trusted: a broker may under-report it,
            if low > at:  # even as 0 for a partition that holds messages; the read below shows the end
                offsets[(topic, p)] = low  # retention deleted it: read what is left
                del recorded[(topic, p)]
            else:
                routes.expect[(topic, p)] = at
        assign(consumer, routes, offsets)
        why, cause = "the partition ends before it", None  # at its end without the recorded message
        try:
            catch_up(consumer, routes, timeout, out_of_range=out_of_range, stop=stop)
        except KafkaClientError as exc:
            if not routes.expect:
                raise
            why, cause = f"nothing could be read there ({exc})", exc
        for (topic, p), at in list(routes.expect.items()):
            if not _holds(kafka_options, topic, p, at):
                raise recreated(topic, p, why) from cause
            log.warning("result topic %s[%d]: the broker holds back committed messages from offset %d on from "
                        "read_committed readers (an uncommitted read finds them there); the epochs after what it "
                        "showed are published again", topic, p, at)
            del routes.expect[(topic, p)]
    finally:
        consumer.close()
    last = {**recorded, **routes.last}  # offsets that hold a message (none where nothing was read)
    return {t: [p.final if writer is None else p.writer_final(writer) for p in f.partitions]
            for t, f in followers.items()}, last


def _holds(kafka_options: Mapping[str, Any], topic: str, partition: int, offset: int, timeout: float = 5.0) -> bool:
    """Whether ``topic[partition]`` holds a message at ``offset``, read uncommitted: a recorded
    message a ``read_committed`` read did not reach may be there, held back by the broker's
    bookkeeping of open transactions (the embedded broker was seen to hold back a killed
    producer's committed transactions for good), rather than gone with a recreated topic."""
    config = consumer_config(kafka_options, None, isolation="read_uncommitted")
    config["auto.offset.reset"] = "error"
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                return msg.offset() == offset
            if msg.error().code() != RdKafkaError._PARTITION_EOF:
                return False  # out of range, or another refusal: nothing is there
        return False
    finally:
        consumer.close()
