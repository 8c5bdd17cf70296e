"""Wire formats (msgpack) for input topics, result topics and progress, with validation.

Input messages:

* an update ``[data, time_ns, diff]`` or a batch ``[[data, time_ns, diff], ...]``, where ``data``
  is an array with one value per declared field; a value is a single update exactly when it has
  three elements and its second is not an array;
* a progress marker ``{"progress": time_ns}``: no later update on this partition has an earlier time.

Decoding never raises on bad input: each bad update becomes a `Malformed` entry carrying one of
the `REASONS` and a precise detail, so the source can dead-letter it and keep the good updates of
the same message.

Output messages (result topics) name the epoch ``[lower, upper)`` and the writer's incarnation:

* a batch ``{"lower": l, "upper": u, "incarnation": id, "updates": [[data, time_ns, diff], ...]}``;
* a progress marker ``{"lower": l, "upper": u, "incarnation": id, "count": n}`` after each epoch on
  every partition, ``n`` being the number of updates that incarnation wrote for ``[l, u)`` on that
  partition. ``upper`` is nil when every input is closed (nothing can change any more). When
  ``W > 1`` workers write the topic, each marks every partition for itself and its markers also
  say ``"writer": i, "writers": W``; a range is complete once all ``W`` writers marked it. A marker
  without them is the only writer's (``writer`` 0 of 1).

Records are tuples in the engine and arrays on the wire; decoding gives tuples back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ..operators.partition import partition_of
from .block import Block
from .exceptions import OptionsError, WireError

__all__ = [
    "MIN_TIME",
    "MAX_TIME",
    "REASONS",
    "FIELD_TYPES",
    "InputFormat",
    "Malformed",
    "Decoded",
    "decode_input",
    "encode_update",
    "encode_updates",
    "encode_progress",
    "OutputBatch",
    "OutputProgress",
    "encode_output_batch",
    "encode_output_updates",
    "encode_output_progress",
    "pack_record",
    "pack_output_update",
    "decode_output",
    "record_partition",
    "to_record",
]

MIN_TIME = -(2**63)
MAX_TIME = 2**63 - 1

REASONS: dict[str, str] = {
    "empty": "the message has no value (null or zero bytes)",
    "oversized": "the message value is larger than the input's max_message_bytes",
    "bad_msgpack": "the value is not one valid msgpack object",
    "shape": "the value is neither an update, a batch of updates nor a progress marker",
    "arity": "an update is not [data, time, diff] or its data has the wrong number of fields",
    "field_type": "a data field has the wrong type, or the data is not an array of hashable values",
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
}

FIELD_TYPES = ("any", "int", "float", "str", "bytes", "bool")


def to_record(value: Any) -> Any:
    """A decoded msgpack value as an engine record: arrays become tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(to_record(v) for v in value)
    return value


@dataclass(frozen=True, eq=False)
class InputFormat:
    """How an input's messages are validated.

    ``fields``: the names of the data fields, or a mapping name -> type (one of `FIELD_TYPES`);
    None accepts any hashable data. ``max_message_bytes``: larger values are dead-lettered.
    ``time_required``: False for reclocked inputs, whose time field is ignored (may be nil).
    """

    fields: Sequence[str] | Mapping[str, str] | None = None
    max_message_bytes: int = 1 << 20
    time_required: bool = True

    def __post_init__(self) -> None:
        if self.fields is not None:
            types = dict(self.fields) if isinstance(self.fields, Mapping) else {f: "any" for f in self.fields}
            if isinstance(self.fields, str):
                raise OptionsError(f"input fields: expected a list of names, got the string {self.fields!r}")
            if not types:
                raise OptionsError("input fields: the list of fields is empty")
            for name, kind in types.items():
                if not isinstance(name, str) or not name:
                    raise OptionsError(f"input fields: field name {name!r} is not a non-empty string")
                if kind not in FIELD_TYPES:
                    raise OptionsError(
                        f"input fields: field {name!r} has type {kind!r}; expected one of {', '.join(FIELD_TYPES)}"
                    )
            if len(types) != len(list(self.fields)):
                raise OptionsError(f"input fields: duplicate field names in {list(self.fields)!r}")
        if not isinstance(self.max_message_bytes, int) or self.max_message_bytes <= 0:
            raise OptionsError(f"input max_message_bytes: expected a positive int, got {self.max_message_bytes!r}")
        object.__setattr__(self, "_validator", _Validator(self))

    def check(self, item: tuple[Any, Any, Any], index: int | None = None) -> tuple[Any, int | None, int] | Malformed:
        """One update ``(data, time, diff)`` (data a tuple) validated and converted, or why not."""
        return self._validator.check(item, index)  # type: ignore[attr-defined, no-any-return]

    @property
    def field_types(self) -> tuple[str, ...] | None:
        if self.fields is None:
            return None
        if isinstance(self.fields, Mapping):
            return tuple(self.fields.values())
        return tuple("any" for _ in self.fields)

    @property
    def field_names(self) -> tuple[str, ...] | None:
        return None if self.fields is None else tuple(self.fields)


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


def _is_int(x: Any) -> bool:
    return type(x) is int  # bool is not an int here; msgpack gives exactly int for integers


def _check_field(kind: str, value: Any) -> Any:
    """The field value converted for `kind`, or raise TypeError."""
    if kind == "any":
        return value
    if kind == "int":
        if type(value) is int:
            return value
    elif kind == "float":
        if type(value) is float:
            return value
        if type(value) is int:
            return float(value)
    elif kind == "str":
        if type(value) is str:
            return value
    elif kind == "bytes":
        if type(value) is bytes:
            return value
    elif kind == "bool":
        if type(value) is bool:
            return value
    raise TypeError(kind)


class _Validator:
    """Validates one decoded update against an `InputFormat`; hot path kept flat."""

    def __init__(self, fmt: InputFormat) -> None:
        self.types = fmt.field_types
        self.names = fmt.field_names
        self.arity = None if self.types is None else len(self.types)
        self.all_any = self.types is None or all(t == "any" for t in self.types)
        self.time_required = fmt.time_required
        # fields all int/float/bool: batches are decoded straight into columns (kernels.unpack)
        self.kinds = None
        if self.types is not None and all(t in _KINDS for t in self.types):
            self.kinds = np.array([_KINDS[t] for t in self.types], dtype=np.int64)
            self.all_int = all(t == "int" for t in self.types)

    def check(self, item: Any, index: int | None) -> tuple[Any, int | None, int] | Malformed:
        if type(item) is not tuple or len(item) != 3:
            size = len(item) if type(item) is tuple else None
            what = f"an array of {size}" if size is not None else type(item).__name__
            return Malformed("arity", f"expected [data, time, diff], got {what}", index)
        data, time, diff = item
        if type(diff) is not int:
            return Malformed("diff_type", f"diff {diff!r} is a {type(diff).__name__}, not an integer", index)
        if diff == 0:
            return Malformed("zero_diff", "diff is 0", index)
        if not MIN_TIME <= diff <= MAX_TIME:
            return Malformed("diff_range", f"diff {diff} is outside int64", index)
        if type(time) is not int:
            if time is None and not self.time_required:
                pass
            else:
                return Malformed("time_type", f"time {time!r} is a {type(time).__name__}, not an integer", index)
        elif not MIN_TIME <= time <= MAX_TIME:
            return Malformed("time_range", f"time {time} is outside int64", index)
        if type(data) is not tuple:
            return Malformed("field_type", f"data {data!r} is a {type(data).__name__}, not an array", index)
        if self.arity is not None and len(data) != self.arity:
            return Malformed(
                "arity", f"data has {len(data)} fields, expected {self.arity} ({', '.join(self.names or ())})", index
            )
        if not self.all_any:
            assert self.types is not None and self.names is not None
            converted = []
            for name, kind, value in zip(self.names, self.types, data):
                try:
                    converted.append(_check_field(kind, value))
                except TypeError:
                    return Malformed(
                        "field_type", f"field {name!r} = {value!r} is a {type(value).__name__}, expected {kind}", index
                    )
            data = tuple(converted)
        try:
            hash(data)
        except TypeError:
            return Malformed("field_type", f"data {data!r} holds a map or another unhashable value", index)
        return (data, time, diff)

    def check_batch(self, items: tuple[Any, ...]) -> list[tuple[Any, int | None, int]] | None:
        """All updates of a batch when every one is valid (checked column-wise at C speed), else
        None: `check` then finds the bad ones one by one."""
        if set(map(type, items)) != {tuple} or set(map(len, items)) != {3}:
            return None
        datas, times, diffs = zip(*items)
        time_types = set(map(type, times))
        if time_types == {int}:
            if min(times) < MIN_TIME or max(times) > MAX_TIME:
                return None
        elif self.time_required or time_types != {type(None)}:
            return None
        if set(map(type, diffs)) != {int} or 0 in diffs or min(diffs) < MIN_TIME or max(diffs) > MAX_TIME:
            return None
        if set(map(type, datas)) != {tuple}:
            return None
        if self.arity is not None and set(map(len, datas)) != {self.arity}:
            return None
        if self.all_any:
            try:
                set(datas)  # every record must be hashable
            except TypeError:
                return None
        else:
            assert self.types is not None
            columns = list(zip(*datas))
            converted = False
            for i, kind in enumerate(self.types):
                if kind == "any":
                    try:
                        set(columns[i])
                    except TypeError:
                        return None
                    continue
                kinds = set(map(type, columns[i]))
                if kind == "float" and kinds <= {float, int}:
                    if int in kinds:
                        columns[i] = tuple(map(float, columns[i]))
                        converted = True
                elif kinds != {_TYPES[kind]}:
                    return None
            if converted:
                datas = tuple(zip(*columns))
        return list(zip(datas, times, diffs))


_TYPES = {"int": int, "float": float, "str": str, "bytes": bytes, "bool": bool}


_KINDS = {"int": 0, "float": 1, "bool": 2}  # kernels.unpack's INT, FLOAT, BOOL


def _unpack_columns(value: bytes, validator: _Validator) -> Block | None:
    """A batch message of int/float/bool fields decoded in one compiled pass, or None when the
    general path must decode it (anything unusual, including every kind of bad input)."""
    from ..operators.kernels.unpack import OK, unpack_batch  # numba: loaded by the first input only

    status, ints, floats, times, diffs = unpack_batch(np.frombuffer(value, dtype=np.uint8), validator.kinds)
    if status != OK:
        return None
    if validator.all_int:
        return Block(ints.T, times, diffs)
    columns = [ints[j].tolist() if kind == 0 else floats[j].tolist() if kind == 1 else ints[j].astype(bool).tolist()
               for j, kind in enumerate(validator.kinds.tolist())]
    return Block(list(zip(*columns, strict=True)), times, diffs)


def decode_input(value: bytes | None, fmt: InputFormat) -> Decoded:
    """Decode and validate one input message value; never raises on bad input."""
    if not value:
        return Decoded([], None, [Malformed("empty", "the message value is null or empty")])
    if len(value) > fmt.max_message_bytes:
        return Decoded(
            [], None, [Malformed("oversized", f"{len(value)} bytes > max_message_bytes {fmt.max_message_bytes}")]
        )
    validator: _Validator = fmt._validator  # type: ignore[attr-defined]
    if validator.kinds is not None:
        block = _unpack_columns(value, validator)
        if block is not None:
            return Decoded(block=block)
    try:
        obj = msgpack.unpackb(value, raw=False, use_list=False, strict_map_key=False)
    except Exception as exc:  # ExtraData, FormatError, StackError, ValueError, UnicodeDecodeError...
        return Decoded([], None, [Malformed("bad_msgpack", f"{type(exc).__name__}: {exc or 'invalid msgpack'}")])
    if type(obj) is dict:
        if set(obj) != {"progress"}:
            return Decoded([], None, [Malformed("shape", f"a map with keys {sorted(map(str, obj))}, expected only 'progress'")])
        t = obj["progress"]
        if type(t) is not int or not MIN_TIME <= t <= MAX_TIME:
            return Decoded([], None, [Malformed("bad_progress", f"progress time {t!r} is not an int64 integer")])
        return Decoded([], t, None)
    if type(obj) is not tuple:
        return Decoded([], None, [Malformed("shape", f"a {type(obj).__name__} ({obj!r:.80}), expected an array or a map")])
    if len(obj) == 3 and type(obj[1]) is not tuple:
        checked = validator.check(obj, None)
        if type(checked) is Malformed:
            return Decoded([], None, [checked])
        return Decoded([checked], single=True)  # type: ignore[list-item]
    fast = validator.check_batch(obj) if obj else []
    if fast is not None:
        return Decoded(fast)
    updates: list[tuple[Any, int | None, int]] = []
    indexes: list[int] = []
    malformed: list[Malformed] | None = None
    check = validator.check
    for i, item in enumerate(obj):
        checked = check(item, i)
        if type(checked) is Malformed:
            if malformed is None:
                malformed = []
            malformed.append(checked)  # type: ignore[arg-type]
        else:
            updates.append(checked)  # type: ignore[arg-type]
            indexes.append(i)
    return Decoded(updates, None, malformed, indexes if malformed else None)


# -- writing input messages (the producer helper and tests) ---------------------------------------


def _pack(obj: Any, what: str) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"encoding {what}: {obj!r:.200} cannot be written as msgpack ({exc})") from exc


def encode_update(data: Any, time: int, diff: int) -> bytes:
    """One input update ``[data, time, diff]``."""
    return _pack([data, time, diff], "an input update")


def encode_updates(updates: Iterable[tuple[Any, int, int]]) -> bytes:
    """A batch of input updates ``[[data, time, diff], ...]``."""
    return _pack([[d, t, r] for d, t, r in updates], "a batch of input updates")


def encode_progress(time: int) -> bytes:
    """An input progress marker ``{"progress": time}``."""
    if type(time) is not int or not MIN_TIME <= time <= MAX_TIME:
        raise WireError(f"encoding a progress marker: time {time!r} is not an int64 integer")
    return _pack({"progress": time}, "a progress marker")


# -- result topics ---------------------------------------------------------------------------------


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
    return _pack(record, f"a record of output {output!r}")


def encode_output_progress(lower: int, upper: int | None, incarnation: str, count: int,
                           writer: tuple[int, int] | None = None) -> bytes:
    """A result progress marker; ``writer`` ``(i, W)`` adds ``writer``/``writers`` (when ``W > 1``)."""
    marker = {"lower": lower, "upper": upper, "incarnation": incarnation, "count": count}
    if writer is not None and writer[1] > 1:
        marker["writer"], marker["writers"] = writer
    return _pack(marker, "a result progress marker")


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
