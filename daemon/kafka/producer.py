"""The update producer: write updates and progress to an input topic without hand-crafting messages.

`UpdateProducer` buffers updates per partition and sends each buffer as one batch message
``[[data, time, diff], ...]``; `advance_to(t)` flushes the buffers and then sends the progress
marker ``{"progress": t}`` to every partition of the topic (``markers="all"``, what the
``explicit`` policy needs when one producer owns the topic) or only to the partitions written
since the last marker (``markers="written"``, when several producers share a topic and each
marks its own partitions). A record always goes to the same partition (the stable hash of its
key, its first field: `formats.result_protocol.record_partition`), so its inserts and removes stay in order. The producer is idempotent, so retries never
duplicate or reorder messages within a partition.

It checks what it can: times must be int64 and not behind the last marker it sent (that would
break its own promise), diffs non-zero ints; errors name the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import msgpack
from confluent_kafka import KafkaException, Producer

from ...operators.errors import ShapeError
from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import KafkaClientError, OptionsError, WireError
from ..formats.msgpack import encode_progress
from ..formats.result_protocol import record_partition
from .client import client_config, topic_partitions

__all__ = ["UpdateProducer"]


class UpdateProducer:
    """Batching producer of updates and progress markers for one input topic."""

    def __init__(
        self,
        topic: str,
        kafka_options: Mapping[str, Any],
        *,
        batch_size: int = 1000,
        markers: str = "all",
        producer_options: Mapping[str, Any] | None = None,
    ) -> None:
        if type(batch_size) is not int or batch_size <= 0:
            raise OptionsError(f"UpdateProducer batch_size: expected a positive int, got {batch_size!r}")
        if markers not in ("all", "written"):
            raise OptionsError(f"UpdateProducer markers: expected 'all' or 'written', got {markers!r}")
        self.topic = topic
        self.batch_size = batch_size
        self.markers = markers
        self.partitions = topic_partitions(kafka_options, topic)
        role = {"enable.idempotence": True}
        config = client_config({"linger.ms": 5, **kafka_options, **(producer_options or {})}, role, who="update producer")
        self._producer = Producer(config)
        self._buffers: list[list[bytes]] = [[] for _ in range(self.partitions)]
        self._written: set[int] = set()
        self._errors: list[str] = []
        self.frontier = T_MIN
        self.sent_updates = 0
        self.sent_messages = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def send(self, data: Any, time: int, diff: int = 1) -> None:
        """Buffer the update ``(data, time, diff)``; ``data`` is a tuple/list of field values."""
        if type(time) is not int or not T_MIN <= time <= T_MAX:
            raise WireError(f"producing to {self.topic!r}: time {time!r} is not an int64 integer")
        if time < self.frontier:
            raise WireError(
                f"producing to {self.topic!r}: time {time} is behind the progress {self.frontier} this producer "
                "already promised"
            )
        if type(diff) is not int or diff == 0:
            raise WireError(f"producing to {self.topic!r}: diff {diff!r} is not a non-zero int")
        try:
            packed = msgpack.packb(data, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError(f"producing to {self.topic!r}: data {data!r:.200} cannot be encoded ({exc})") from exc
        try:
            partition = record_partition(data, self.partitions) if self.partitions > 1 else 0
        except ShapeError as exc:
            raise WireError(f"producing to {self.topic!r}: data {data!r:.200} has no stable key ({exc})") from exc
        buffer = self._buffers[partition]
        buffer.append(b"\x93" + packed + msgpack.packb(time) + msgpack.packb(diff))
        if len(buffer) >= self.batch_size:
            self._send_buffer(partition)

    def insert(self, data: Any, time: int) -> None:
        self.send(data, time, 1)

    def remove(self, data: Any, time: int) -> None:
        self.send(data, time, -1)

    def _send_buffer(self, partition: int) -> None:
        buffer = self._buffers[partition]
        if not buffer:
            return
        value = msgpack.Packer().pack_array_header(len(buffer)) + b"".join(buffer)
        self._produce(partition, value)
        self.sent_updates += len(buffer)
        self._written.add(partition)
        self._buffers[partition] = []

    def _produce(self, partition: int, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, partition=partition, on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as exc:
                raise KafkaClientError(f"producing to {self.topic}[{partition}]: {exc}") from exc
        self.sent_messages += 1
        self._producer.poll(0)

    def advance_to(self, time: int) -> None:
        """Send buffered updates, then promise that no later update has a time < ``time``."""
        if type(time) is not int or not T_MIN <= time <= T_MAX:
            raise WireError(f"producing progress to {self.topic!r}: time {time!r} is not an int64 integer")
        if time < self.frontier:
            raise WireError(f"producing progress to {self.topic!r}: {time} is behind the previous marker {self.frontier}")
        for partition in range(self.partitions):
            self._send_buffer(partition)
        targets = range(self.partitions) if self.markers == "all" else sorted(self._written)
        marker = encode_progress(time)
        for partition in targets:
            self._produce(partition, marker)
        self._written.clear()
        self.frontier = time

    def flush(self, timeout: float = 30.0) -> None:
        """Send buffered updates and wait for every delivery; KafkaClientError names failed ones."""
        for partition in range(self.partitions):
            self._send_buffer(partition)
        remaining = self._producer.flush(timeout)
        if remaining:
            raise KafkaClientError(f"producing to {self.topic!r}: {remaining} messages not delivered within {timeout} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaClientError(f"producing to {self.topic!r}: {len(errors)} deliveries failed, first: {errors[0]}")

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)

    def __enter__(self) -> UpdateProducer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
