"""Whether the broker still holds the offsets a restore resumes from.

`check_offsets` is called before a worker resumes its inputs at a snapshot's offsets. It returns
only when, for every (topic, partition) -> offset given, the partition exists, its first offset is
not beyond the offset (nothing was deleted by retention) and its log reaches the offset (the topic
was not deleted and recreated shorter); otherwise it raises `RecoveryError` saying which partition
and why, instead of letting the worker silently skip or re-read data. A caller may assume it reads
watermarks (and, where a broker under-reports its high watermark, one message before the offset)
with a short-lived consumer of its own, commits nothing and leaves no consumer group offsets behind.
An offset of 0 or less needs only its partition to exist.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError as RdKafkaError, KafkaException, TopicPartition

from ..exceptions import KafkaClientError, RecoveryError
from ..kafka.client import client_config, topic_partitions

__all__ = ["check_offsets"]


def check_offsets(kafka_options: Mapping[str, Any], offsets: Mapping[tuple[str, int], int], *,
                  timeout: float = 10.0) -> None:
    """RecoveryError unless the broker holds every (topic, partition) -> offset to resume from:
    the partition exists, its first offset is not beyond it, and its log reaches it."""
    counts = {topic: topic_partitions(kafka_options, topic) for topic in {t for t, _ in offsets}}
    for (topic, p), o in sorted(offsets.items()):
        if p >= counts[topic]:
            raise RecoveryError(f"resuming {topic}[{p}] at offset {o}: the topic now has {counts[topic]} partitions; "
                                "the updates of that partition after the snapshot are gone")
    config = client_config(kafka_options, {"group.id": "ddflow-offset-check", "enable.auto.commit": False,
                                           "enable.partition.eof": True, "auto.offset.reset": "error"},
                           who="offset check")
    consumer = Consumer(config)
    try:
        suspicious = {}
        for (topic, p), o in sorted(offsets.items()):
            if o <= 0:
                continue
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
            except KafkaException as exc:
                raise KafkaClientError(f"reading the offsets of {topic}[{p}]: {exc}") from exc
            if low > o:
                raise RecoveryError(
                    f"resuming {topic}[{p}] at offset {o}: the broker's first offset is {low}; the updates at offsets "
                    f"{o}..{low - 1} were deleted (retention?) and restoring would silently lose them. Restore a newer "
                    "checkpoint, or load a backfill snapshot that covers them."
                )
            if high < o:  # beyond the end, or a broker that under-reports its high watermark: read to see
                suspicious[(topic, p)] = (o, high)
        if suspicious:
            _probe(consumer, suspicious, timeout)
    finally:
        consumer.close()


def _probe(consumer: Consumer, suspicious: Mapping[tuple[str, int], tuple[int, int]], timeout: float) -> None:
    """Read at ``offset - 1`` of each partition: a message or an end-of-partition event shows the
    log reaches the offset; an out-of-range error or silence shows it does not."""
    consumer.assign([TopicPartition(t, p, o - 1) for (t, p), (o, _) in suspicious.items()])
    waiting = dict(suspicious)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.1):
            key = (msg.topic(), msg.partition())
            if key not in waiting:
                continue
            err = msg.error()
            o, high = waiting[key]
            if err is None:
                del waiting[key]  # the message at offset - 1 (or a later one) exists
            elif err.code() == RdKafkaError._PARTITION_EOF and msg.offset() >= o:
                del waiting[key]
            else:
                what = f"it ends at offset {msg.offset()}" if err.code() == RdKafkaError._PARTITION_EOF else f"{err}"
                raise RecoveryError(f"resuming {key[0]}[{key[1]}] at offset {o}: {what} (high watermark {high}); "
                                    "was the topic deleted and recreated?")
    if waiting:
        (topic, p), (o, high) = next(iter(waiting.items()))
        raise RecoveryError(
            f"resuming {topic}[{p}] at offset {o}: the partition ends before it (high watermark {high}, nothing "
            f"readable at offset {o - 1} within {timeout} s); was the topic deleted and recreated? Resuming there "
            "would skip whatever is written up to that offset."
        )
