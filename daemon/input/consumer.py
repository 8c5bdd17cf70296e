"""The input consumer: where a Kafka source calls librdkafka, and nowhere else.

`ConsumerTransport` is the part of `source.KafkaSource` that talks to the broker: the consumer's
configuration (partitions *assigned*, no group rebalancing; offsets never committed by the
consumer, the sink commits them; ``read_committed``; end-of-partition events on), assigning the
partitions, reading, pausing and resuming them, their high watermarks and the consumer lag they
give, and the group's committed offsets. A failed call raises `KafkaClientError` naming what it
did, never a confluent_kafka exception. A test double (`testing.ReplaySource`) replaces
`_client_config` and the eight calls under "the transport"; everything above them (decoding, progress, floors, pacing) then runs unchanged.

The source sets ``_config`` (from `_client_config`), ``_kafka_options``, ``_inputs`` (topic -> an
input's state, with its ``stats``) and ``_consumer`` (None until `_assign`'s result is stored;
`consumer` raises until then, and after `close`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ..exceptions import KafkaClientError
from ..kafka.client import client_config, read_position, topic_partitions

log = logging.getLogger("ddflow.daemon.input.consumer")

__all__ = ["ConsumerTransport"]


class ConsumerTransport:
    """The Kafka consumer of a source: its configuration and every call made on it."""

    _config: dict[str, Any]
    _kafka_options: dict[str, Any]
    _inputs: Mapping[str, Any]
    _consumer: Any

    @staticmethod
    def _client_config(kafka_options: Mapping[str, Any], group_id: str, consumer_options: Mapping[str, Any] | None,
                       strict_offsets: bool) -> dict[str, Any]:
        role = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
        user = dict(consumer_options or {})
        config = client_config({**kafka_options, **{k: v for k, v in user.items() if k not in role}}, role,
                               who="input consumer")
        config.setdefault("fetch.wait.max.ms", 100)
        if strict_offsets:
            config["auto.offset.reset"] = "error"
        config.setdefault("auto.offset.reset", "earliest")
        return config

    # -- the transport: the Kafka consumer (`testing.ReplaySource` replaces these eight) -----------

    def _partition_count(self, topic: str) -> int:
        return topic_partitions(self._kafka_options, topic)

    def _assign(self, assignment: list[TopicPartition]) -> Any:
        consumer = Consumer(self._config)
        try:
            consumer.assign(assignment)
        except KafkaException as exc:
            consumer.close()
            raise KafkaClientError(f"assigning input partitions {[(tp.topic, tp.partition) for tp in assignment]}: {exc}") from exc
        return consumer

    def _consume(self, max_messages: int, timeout: float) -> list[Any]:
        """Up to ``max_messages`` of what the consumer holds, waiting at most ``timeout`` seconds
        for the first only (librdkafka's own call waits for all ``max_messages`` or the timeout)."""
        try:
            consumer = self.consumer
            messages = consumer.consume(num_messages=max_messages, timeout=0)
            if not messages and timeout > 0:
                messages = consumer.consume(num_messages=1, timeout=timeout)
                if messages and max_messages > 1:
                    messages += consumer.consume(num_messages=max_messages - 1, timeout=0)
            return messages
        except KafkaException as exc:
            raise KafkaClientError(f"reading inputs {sorted(self._inputs)}: {exc}") from exc

    def _pause(self, partitions: list[tuple[str, int]]) -> None:
        try:
            self.consumer.pause([TopicPartition(t, p) for t, p in partitions])
        except KafkaException as exc:
            raise KafkaClientError(f"pausing input partitions {partitions}: {exc}") from exc

    def _resume(self, partitions: list[tuple[str, int]]) -> None:
        try:
            self.consumer.resume([TopicPartition(t, p) for t, p in partitions])
        except KafkaException as exc:
            raise KafkaClientError(f"resuming input partitions {partitions}: {exc}") from exc

    def _high_watermark(self, topic: str, partition: int) -> int | None:
        try:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except KafkaException:
            return None
        return high

    def _position(self, topic: str, partition: int) -> int | None:
        return read_position(self.consumer, topic, partition)

    def _committed(self, assignment: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """The consumer group's committed offset per partition of ``assignment`` that has one
        (the sink commits them with each epoch's outputs and dead letters)."""
        try:
            found = self.consumer.committed(assignment, timeout=30)
        except KafkaException as exc:
            raise KafkaClientError(f"reading the committed offsets of input partitions: {exc}") from exc
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.error is None and tp.offset >= 0}

    def _committed_or_none(self, assignment: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """`_committed`, or none when the broker cannot say (logged): a replay then writes the
        dead letters of the messages it reads again a second time."""
        try:
            return self._committed(assignment)
        except KafkaClientError as exc:
            log.warning("%s; dead letters of messages read again are written again", exc)
            return {}

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            raise KafkaClientError("input consumer: the source is not open (call open() first)")
        return self._consumer

    @property
    def assigned(self) -> bool:
        return self._consumer is not None

    def _update_lag(self) -> None:
        """Consumer lag from the watermarks last seen in fetch responses (informational only)."""
        if self._consumer is None:
            return
        for topic, state in self._inputs.items():
            for p, pstats in state.stats.partitions.items():
                high = self._high_watermark(topic, p)
                if high is not None and high >= 0:
                    pstats.high_watermark = high
                    pstats.lag = max(0, high - max(pstats.offset, self._position(topic, p) or -1))

