"""The format-neutral types: what every decoder gives and every encoder takes.

A decoder turns one message value into a `Decoded` (good updates, as rows or as a column
`block.Block`, a progress time, and the bad parts as `Malformed`, each with one of the `REASONS`);
an `Encoder` writes an output's epochs as `Message` tuples; a `Reader` reads an output's data
messages back. Nothing here knows a wire format: the format modules (`msgpack`, `json`,
`debezium`) implement these protocols, and `schema.InputFormat` says how an input's records are
validated. Records are tuples in the engine and arrays on the wire; `to_record` gives tuples back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..block import Block

__all__ = [
    "REASONS",
    "FIELD_TYPES",
    "Malformed",
    "Decoded",
    "to_record",
    "Update",
    "Message",
    "Decoder",
    "Encoder",
    "Reader",
]

REASONS: dict[str, str] = {
    "empty": "the message has no value (null or zero bytes)",
    "oversized": "the message value is larger than the input's max_message_bytes",
    "bad_msgpack": "the value is not one valid msgpack object",
    "shape": "the value is neither an update, a batch of updates nor a progress marker",
    "arity": "an update is not [data, time, diff] or its data has the wrong number of fields",
    "field_type": "a data field has the wrong type, or the data is not an array of hashable values",
    "field_range": "a data value no output can carry: an integer outside int64 or a float that is not finite",
    "time_type": "the time is not an integer",
    "time_range": "the time is outside int64",
    "diff_type": "the diff is not an integer",
    "zero_diff": "the diff is zero",
    "diff_range": "the diff is outside int64",
    "bad_progress": "a progress marker whose time is not an int64 integer",
    "bad_json": "the value is not one valid JSON document (json and debezium inputs)",
    "missing_field": "a JSON object or Debezium row lacks a declared field, or a JSON update its time or diff",
    "bad_event": "a Debezium change event without a usable op, before/after row or timestamp",
    "late": "the update's time is behind the input frontier and the late policy is 'reject'",
    "user_function": "a user function raised on this record and the dataflow's on_error policy is 'dead_letter'",
}

FIELD_TYPES = ("any", "int", "float", "str", "bytes", "bool")


def to_record(value: Any) -> Any:
    """A decoded msgpack value as an engine record: arrays become tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(to_record(v) for v in value)
    return value


@dataclass(frozen=True)
class Malformed:
    """One bad update (or a whole bad message when ``index`` is None) and why."""

    reason: str
    detail: str
    index: int | None = None


class Decoded:
    """The content of one input message: good updates, a progress time, and bad parts.

    The good updates are ``updates`` (``(data, time, diff)`` tuples) or, equivalently, ``block``
    (the same as columns, see `block.Block`): a message decoded straight into columns has only its
    block until its rows are asked for, and the other way round. ``indexes``: the position in the
    message of each good update, when the message is a batch some of whose updates are bad (None:
    the updates are the batch's, in order, or the message is a single update). ``single``: the
    message is one update, not a batch. ``tombstone``: a null value (Debezium's after a delete),
    skipped and counted, not an error."""

    __slots__ = ("_updates", "_block", "progress", "malformed", "indexes", "single", "tombstone")

    def __init__(
        self,
        updates: list[tuple[Any, int | None, int]] | None = None,
        progress: int | None = None,
        malformed: list[Malformed] | None = None,
        indexes: list[int] | None = None,
        single: bool = False,
        tombstone: bool = False,
        *,
        block: Block | None = None,
    ) -> None:
        self._updates = updates if updates is not None or block is not None else []
        self._block = block
        self.progress = progress
        self.malformed = malformed
        self.indexes = indexes
        self.single = single
        self.tombstone = tombstone

    @property
    def updates(self) -> list[tuple[Any, int | None, int]]:
        if self._updates is None:
            assert self._block is not None
            self._updates = self._block.rows()
        return self._updates

    @property
    def block(self) -> Block:
        if self._block is None:
            self._block = Block.from_rows(self._updates)  # type: ignore[arg-type]
        return self._block

    def block_at(self, time: int) -> Block:
        """The good updates as a block, all at ``time`` (their own times may be None)."""
        if self._block is not None:
            return self._block.at(time)
        return Block.from_rows(self._updates, time=time)  # type: ignore[arg-type]

    def __len__(self) -> int:
        """The number of good updates."""
        return len(self._block) if self._block is not None else len(self._updates)  # type: ignore[arg-type]

    def index(self, i: int) -> int | None:
        """The position in the message of ``updates[i]`` (None for a single-update message)."""
        if self.single:
            return None
        return i if self.indexes is None else self.indexes[i]



Update = tuple[Any, int, int]
# (topic, partition or None for the producer's partitioner on the key, key, value, headers)
Message = tuple[str, int | None, bytes | None, bytes | None, list[tuple[str, bytes]] | None]  # value None: a tombstone


class Decoder(Protocol):
    """Turns one input message value into a `Decoded`; never raises on bad input."""

    name: str

    def decode(self, value: bytes | None) -> Decoded: ...


class Encoder(Protocol):
    """Writes one output's epochs. ``progress_topic``: where the markers go (None: the data topic)."""

    name: str
    topic: str
    progress_topic: str | None

    def partition(self, record: Any, partitions: int) -> int:
        """The data partition of ``record`` (stable across processes and runs)."""
        ...

    def epoch(
        self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Update],
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
    ) -> tuple[list[Message], Message]:
        """The data messages of ``updates`` (all of ``partition``) for epoch ``[lower, upper)``
        and the progress marker that closes the epoch on that partition (naming ``writer``
        ``(i, W)`` when the output has ``W > 1`` writers). ``snapshot``: the epoch publishes the
        contents of a snapshot the worker started from (a backfill or a checkpoint), which a
        format may say (debezium: ``r`` events)."""
        ...

    def partitions(self, block: Block, partitions: int) -> np.ndarray:
        """The data partition of each update of ``block`` (`partition` of each record)."""
        ...

    def epoch_block(
        self, lower: int, upper: int | None, incarnation: str, partition: int, block: Block,
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
    ) -> tuple[list[Message], Message]:
        """`epoch` of the updates of ``block`` (an encoder of columns writes them without a
        Python object per update)."""
        ...

    def restamp(self, message: Message, incarnation: str) -> Message:
        """``message`` (one `epoch` made) naming ``incarnation`` instead (a re-sent epoch)."""
        ...


class Reader(Protocol):
    """Reads an output's data messages back (the result client's side of an `Encoder`)."""

    def updates(self, value: bytes | None) -> list[Update]:
        """The updates one data message holds; raises `WireError` on anything else."""
        ...
