"""The update producer: write updates and progress to an input topic without hand-crafting messages.

`UpdateProducer` writes the input's wire ``format``:

* ``msgpack`` (the default): it buffers updates per partition and sends each buffer as one batch
  message ``[[data, time, diff], ...]``; `advance_to(t)` flushes the buffers and then sends the
  progress marker ``{"progress": t}``;
* ``json``: one message per update, an object of the input's ``fields`` plus ``time`` and
  ``diff`` (``[data, time, diff]`` without fields), keyed by the record's key fields; progress
  markers ``{"progress": t}`` in JSON;
* ``debezium``: one change event per unit of diff (``c`` inserting ``after``, ``d`` retracting
  ``before``, at ``ts_ns``), keyed like json; Debezium has no progress markers (its inputs use the
  ``monotonic`` or ``reclock`` policy), so `advance_to` only moves the producer's own frontier.

Markers go to every partition of the topic (``markers="all"``, what the ``explicit`` policy
needs when one producer owns the topic) or only to the partitions written since the last marker
(``markers="written"``, when several producers share a topic and each marks its own
partitions). A record always goes to the same partition (msgpack: the stable hash of its key, its
first field, `formats.result_protocol.record_partition`; json/debezium: its key fields by the
input's ``partitioner``, the stable hash or Kafka's ``murmur2`` over the message key), so its
inserts and removes stay in order. The producer is idempotent, so retries never duplicate or
reorder messages within a partition.

It checks what it can: times must be int64 and not behind the last marker it sent (that would
break its own promise), diffs non-zero ints; errors name the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import msgpack
from confluent_kafka import KafkaException, Producer

from ...operators.errors import ShapeError
from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import KafkaClientError, OptionsError, WireError
from ..formats.msgpack import encode_progress
from ..formats.result_protocol import record_partition
from ..formats.rows import dumps
from ..formats.types import to_record
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
        format: str = "msgpack",
        fields: Sequence[str] | Mapping[str, str] | None = None,
        key: Sequence[str] | None = None,
        partitioner: str = "ddflow",
    ) -> None:
        if type(batch_size) is not int or batch_size <= 0:
            raise OptionsError(f"UpdateProducer batch_size: expected a positive int, got {batch_size!r}")
        if markers not in ("all", "written"):
            raise OptionsError(f"UpdateProducer markers: expected 'all' or 'written', got {markers!r}")
        self.topic = topic
        self.batch_size = batch_size
        self.markers = markers
        self.format = format
        if format == "msgpack" and (fields or key or partitioner != "ddflow"):
            raise OptionsError("UpdateProducer fields, key and partitioner: only the json and debezium formats use "
                               "them (msgpack batches carry no key per record)")
        self._events = None if format == "msgpack" else _events(format, topic, fields, key, partitioner)
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
        if self._events is not None:
            self._send_events(data, time, diff)
            return
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

    def _send_events(self, data: Any, time: int, diff: int) -> None:
        """One json message, or ``|diff|`` debezium events, for the update (see the module)."""
        encoding = self._events
        layout = encoding.layout
        record = to_record(data)
        if layout.names is not None and len(layout.names) == 1:
            if type(record) is not tuple or len(record) != 1:
                raise WireError(f"producing to {self.topic!r}: data {data!r:.200} is not one value "
                                f"([{layout.names[0]}])")
            record = record[0]
        try:
            key = layout.key(record)
            partition = layout.partition(record, self.partitions) if self.partitions > 1 else 0
            if self.format == "json":
                values = [encoding.value(record, time, diff)]
            else:
                before, after, op = (None, record, "c") if diff > 0 else (record, None, "d")
                values = [encoding.event(op, before, after, time)] * abs(diff)
        except ShapeError as exc:
            raise WireError(f"producing to {self.topic!r}: data {data!r:.200} has no stable key ({exc})") from exc
        for value in values:
            self._produce(partition, value, key)
        self.sent_updates += 1
        self._written.add(partition)

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

    def _produce(self, partition: int, value: bytes, key: bytes | None = None) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, partition=partition, on_delivery=self._on_delivery)
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
        if self.format == "debezium":  # Debezium has no progress markers
            self._written.clear()
            self.frontier = time
            return
        targets = range(self.partitions) if self.markers == "all" else sorted(self._written)
        marker = encode_progress(time) if self.format == "msgpack" else dumps({"progress": time})
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


def _events(format: str, topic: str, fields: Sequence[str] | Mapping[str, str] | None, key: Sequence[str] | None,
            partitioner: str) -> Any:
    """The encoder whose rows, keys and partitions (json) or events (debezium) the producer writes."""
    from ..formats import FORMATS, encoder

    if format not in FORMATS:
        raise OptionsError(f"UpdateProducer format: {format!r} is not one of {', '.join(FORMATS)}")
    return encoder(format, topic, topic, fields=fields, key=key, progress_topic=f"{topic}.unused",
                   partitioner=partitioner, source={"name": "ddflow-produce"})
