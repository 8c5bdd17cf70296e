"""The result-topic protocol of msgpack outputs: an epoch's batches and its progress markers.

Output messages (result topics) name the epoch ``[lower, upper)`` and the writer's incarnation:

* a batch ``{"lower": l, "upper": u, "incarnation": id, "updates": [[data, time_ns, diff], ...]}``;
* a progress marker ``{"lower": l, "upper": u, "incarnation": id, "count": n}`` after each epoch on
  every partition, ``n`` being the number of updates that incarnation wrote for ``[l, u)`` on that
  partition. ``upper`` is nil when every input is closed (nothing can change any more). When
  ``W > 1`` workers write the topic, each marks every partition for itself and its markers also
  say ``"writer": i, "writers": W``; a range is complete once all ``W`` writers marked it. A marker
  without them is the only writer's (``writer`` 0 of 1).

A topic holds, per partition, batches of at most ``max_batch_updates`` updates and then the epoch's
progress marker on the same partition; a record's partition is the stable key hash of its key
(first field) modulo the partition count. An epoch whose records are int columns (`block.Block`:
ints, or tuples of ints) is partitioned by the key column's hash and encoded in one compiled pass
(`kernels.pack`), without a Python object per update. `MsgpackEncoder` writes the protocol,
`decode_output` reads it back (the result client).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ...operators.partition import finish, int_elements, partition_of
from ..block import Block
from ..exceptions import WireError
from .msgpack import pack
from .types import Message, Update, to_record

__all__ = [
    "MsgpackEncoder",
    "OutputBatch",
    "OutputProgress",
    "check_writer",
    "decode_output",
    "encode_output_batch",
    "encode_output_progress",
    "encode_output_updates",
    "pack_output_update",
    "pack_record",
    "record_partition",
]


@dataclass(frozen=True)
class OutputBatch:
    lower: int
    upper: int | None
    incarnation: str
    updates: list[tuple[Any, int, int]]


@dataclass(frozen=True)
class OutputProgress:
    lower: int
    upper: int | None
    incarnation: str
    count: int
    writer: int = 0  # which of the topic's writers marked the range (0 of 1 when the marker does not say)
    writers: int = 1


def record_partition(record: Any, partitions: int) -> int:
    """The topic partition of a record (a tuple, or a list as a producer gives it): the stable key
    hash of its key (first field) modulo ``partitions`` (`ddflow.operators.partition.partition_of`),
    the same in every process."""
    return partition_of(to_record(record) if type(record) is list else record, partitions)


def encode_output_batch(lower: int, upper: int | None, incarnation: str, packed_updates: Sequence[bytes]) -> bytes:
    """A result batch from already packed ``[data, time, diff]`` arrays (see `pack_output_update`)."""
    packer = msgpack.Packer(use_bin_type=True)
    head = packer.pack_map_header(4)
    head += packer.pack("lower") + packer.pack(lower)
    head += packer.pack("upper") + packer.pack(upper)
    head += packer.pack("incarnation") + packer.pack(incarnation)
    head += packer.pack("updates") + packer.pack_array_header(len(packed_updates))
    return head + b"".join(packed_updates)


def encode_output_updates(
    lower: int, upper: int | None, incarnation: str, updates: Sequence[tuple[Any, int, int]], output: str
) -> bytes:
    """A result batch from ``(record, time, diff)`` tuples (one msgpack call for the whole batch)."""
    try:
        return msgpack.packb(
            {"lower": lower, "upper": upper, "incarnation": incarnation, "updates": updates}, use_bin_type=True
        )
    except (TypeError, ValueError, OverflowError):
        for record, _, _ in updates:
            pack_record(record, output)  # raises WireError naming the record
        raise


_ARRAY3 = b"\x93"


def pack_output_update(packed_record: bytes, time: int, diff: int) -> bytes:
    """One result update ``[data, time, diff]`` whose record is already packed."""
    return _ARRAY3 + packed_record + msgpack.packb(time) + msgpack.packb(diff)


def pack_record(record: Any, output: str) -> bytes:
    """A result record as msgpack (tuples as arrays); WireError names the output and the record."""
    return pack(record, f"a record of output {output!r}")


def encode_output_progress(lower: int, upper: int | None, incarnation: str, count: int,
                           writer: tuple[int, int] | None = None) -> bytes:
    """A result progress marker; ``writer`` ``(i, W)`` adds ``writer``/``writers`` (when ``W > 1``)."""
    marker = {"lower": lower, "upper": upper, "incarnation": incarnation, "count": count}
    if writer is not None and writer[1] > 1:
        marker["writer"], marker["writers"] = writer
    return pack(marker, "a result progress marker")


def check_writer(writer: Any, writers: Any) -> tuple[int, int]:
    """``(writer, writers)`` of a marker, checked (TypeError naming them otherwise)."""
    if type(writer) is not int or type(writers) is not int or not 0 <= writer < writers:
        raise TypeError(f"writer {writer!r} of {writers!r} writers")
    return writer, writers


def decode_output(value: bytes | None) -> OutputBatch | OutputProgress:
    """Decode a result-topic message; raises WireError on anything that is not the protocol."""
    if not value:
        raise WireError("decoding a result message: the value is null or empty")
    try:
        obj = msgpack.unpackb(value, raw=False, use_list=False, strict_map_key=False)
    except Exception as exc:
        raise WireError(f"decoding a result message: not msgpack ({type(exc).__name__}: {exc})") from exc
    if type(obj) is not dict:
        raise WireError(f"decoding a result message: expected a map, got {type(obj).__name__}")
    try:
        lower, upper, inc = obj["lower"], obj["upper"], obj["incarnation"]
        if type(lower) is not int or (upper is not None and type(upper) is not int) or type(inc) is not str:
            raise TypeError("lower/upper/incarnation")
        if "updates" in obj:
            return OutputBatch(lower, upper, inc, [(to_record(d), t, r) for d, t, r in obj["updates"]])
        count = obj["count"]
        if type(count) is not int:
            raise TypeError("count")
        return OutputProgress(lower, upper, inc, count, *check_writer(obj.get("writer", 0), obj.get("writers", 1)))
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"decoding a result message: malformed {sorted(map(str, obj))} ({exc})") from exc


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
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
    ) -> tuple[list[Message], Message]:
        records = block.records
        if not isinstance(records, np.ndarray):
            return self.epoch(lower, upper, incarnation, partition, block.rows(), writer)
        from .kernels.pack import INT, max_packed_size, pack_updates  # numba: by the first output only

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
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
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
    """The bytes of a result batch before its ``count`` updates (as `encode_output_updates`
    writes the same batch)."""
    packer = msgpack.Packer(use_bin_type=True)
    return (packer.pack_map_header(4) + packer.pack("lower") + packer.pack(lower) + packer.pack("upper")
            + packer.pack(upper) + packer.pack("incarnation") + packer.pack(incarnation) + packer.pack("updates")
            + packer.pack_array_header(count))
