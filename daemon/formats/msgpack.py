"""The msgpack format: ddflow's own input and result-topic format (defined in `wire`).

Input messages are decoded by `wire.decode_input`. A result topic holds, per partition, batches
``{"lower", "upper", "incarnation", "updates"}`` of at most ``max_batch_updates`` updates and then
the epoch's progress marker on the same partition; a record's partition is the stable key hash
of its key (first field) modulo the partition count. An epoch whose records are int columns
(`block.Block`: ints, or tuples of ints) is partitioned by the key column's hash and encoded in
one compiled pass (`ddflow.operators.kernels.pack`), without a Python object per update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from ...operators.partition import finish, int_elements
from ..block import Block
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

    def partitions(self, block: Block, partitions: int) -> np.ndarray:
        records = block.records
        if isinstance(records, np.ndarray):  # the stable key hash of the key column, vectorized
            keys = records if records.ndim == 1 else records[:, 0]
            return finish(int_elements(keys)) % partitions
        return np.fromiter((record_partition(r, partitions) for r in records), dtype=np.int64, count=len(records))

    def epoch_block(
        self, lower: int, upper: int | None, incarnation: str, partition: int, block: Block,
        writer: tuple[int, int] | None = None,
    ) -> tuple[list[Message], Message]:
        records = block.records
        if not isinstance(records, np.ndarray):
            return self.epoch(lower, upper, incarnation, partition, block.rows(), writer)
        from ...operators.kernels.pack import INT, max_packed_size, pack_updates  # numba: by the first output only

        n = len(block)
        scalar = records.ndim == 1
        values = np.ascontiguousarray(records.reshape(n, 1) if scalar else records, dtype=np.int64)
        kinds = np.full(values.shape[1], INT, dtype=np.int64)
        size = self.max_batch_updates
        out = np.empty(max_packed_size(min(n, size), values.shape[1]), dtype=np.uint8)
        data: list[Message] = []
        for i in range(0, n, size):
            j = min(i + size, n)
            written = pack_updates(values[i:j], kinds, scalar, block.times[i:j], block.diffs[i:j], out)
            value = _batch_head(lower, upper, incarnation, j - i) + out[:written].tobytes()
            data.append((self.topic, partition, None, value, None))
        marker = encode_output_progress(lower, upper, incarnation, n, writer)
        return data, (self.topic, partition, None, marker, None)

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


def _batch_head(lower: int, upper: int | None, incarnation: str, count: int) -> bytes:
    """The bytes of a result batch before its ``count`` updates (as `wire.encode_output_updates`
    writes the same batch)."""
    packer = msgpack.Packer(use_bin_type=True)
    return (packer.pack_map_header(4) + packer.pack("lower") + packer.pack(lower) + packer.pack("upper")
            + packer.pack(upper) + packer.pack("incarnation") + packer.pack(incarnation) + packer.pack("updates")
            + packer.pack_array_header(count))
