"""The msgpack format: ddflow's own input and result-topic format (defined in `wire`).

Input messages are decoded by `wire.decode_input`. A result topic holds, per partition, batches
``{"lower", "upper", "incarnation", "updates"}`` of at most ``max_batch_updates`` updates and then
the epoch's progress marker on the same partition; a record's partition is the stable key hash
of its key (first field) modulo the partition count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from ..wire import (
    Decoded,
    InputFormat,
    decode_input,
    encode_output_progress,
    encode_output_updates,
    record_partition,
)
from . import Message, Update

__all__ = ["MsgpackDecoder", "MsgpackEncoder"]


class MsgpackDecoder:
    """Input messages in msgpack: an update, a batch of updates, or a progress marker."""

    name = "msgpack"

    def __init__(self, fields: InputFormat) -> None:
        self.fields = fields

    def decode(self, value: bytes | None) -> Decoded:
        return decode_input(value, self.fields)


class MsgpackEncoder:
    """Result batches and progress markers, all on the data topic."""

    name = "msgpack"
    progress_topic = None

    def __init__(self, output: str, topic: str, *, max_batch_updates: int = 5000) -> None:
        self.output = output
        self.topic = topic
        self.max_batch_updates = max_batch_updates

    def partition(self, record: Any, partitions: int) -> int:
        return record_partition(record, partitions)

    def epoch(
        self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Update],
        writer: tuple[int, int] | None = None,
    ) -> tuple[list[Message], Message]:
        size = self.max_batch_updates
        data: list[Message] = [
            (self.topic, partition, None, encode_output_updates(lower, upper, incarnation, updates[i : i + size],
                                                                self.output), None)
            for i in range(0, len(updates), size)
        ]
        marker = encode_output_progress(lower, upper, incarnation, len(updates), writer)
        return data, (self.topic, partition, None, marker, None)

    def restamp(self, message: Message, incarnation: str) -> Message:
        topic, partition, key, value, headers = message
        obj = msgpack.unpackb(value, raw=False, strict_map_key=False)
        obj["incarnation"] = incarnation
        return topic, partition, key, msgpack.packb(obj, use_bin_type=True), headers
