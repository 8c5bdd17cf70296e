"""The msgpack format: ddflow's own input format, its decoder and the producer's encoders.

Input messages:

* an update ``[data, time_ns, diff]`` or a batch ``[[data, time_ns, diff], ...]``, where ``data``
  is an array with one value per declared field; a value is a single update exactly when it has
  three elements and its second is not an array;
* a progress marker ``{"progress": time_ns}``: no later update on this partition has an earlier time.

Decoding never raises on bad input: each bad update becomes a `types.Malformed` entry carrying one
of the `types.REASONS` and a precise detail, so the source can dead-letter it and keep the good
updates of the same message. A batch of an input with declared fields is decoded straight into
columns (`kernels.unpack`: one compiled pass, and one msgpack call per str, bytes or untyped field),
records as `RecordColumns` (an int64 array block when every field is an int): no Python object per
update, whatever the fields' types. The result topics of msgpack outputs are
`result_protocol`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack
import numpy as np

from ...operators.lattice import T_MAX, T_MIN
from ..block import Block
from ...operators.input import RecordColumns
from ..exceptions import WireError
from .ranges import column_in_range
from .schema import InputFormat, _Validator
from .types import Decoded, Malformed

__all__ = ["MsgpackDecoder", "decode_input", "encode_update", "encode_updates", "encode_progress", "pack"]


class MsgpackDecoder:
    """Input messages in msgpack: an update, a batch of updates, or a progress marker."""

    name = "msgpack"

    def __init__(self, fields: InputFormat) -> None:
        self.fields = fields

    def decode(self, value: bytes | None) -> Decoded:
        return decode_input(value, self.fields)


def _unpack_columns(value: bytes, validator: _Validator) -> Block | None:
    """A batch message of declared fields decoded into columns in one compiled pass (and one
    msgpack call per str, bytes or untyped field), or None when the general path must decode it
    (anything unusual, including every kind of bad input)."""
    from .kernels.unpack import ANY, OK, unpack_columns  # numba: loaded by the first input only

    status, columns, times, diffs = unpack_columns(value, validator.kinds)
    if status != OK:
        return None
    if validator.all_int:
        return Block(np.column_stack(columns) if columns[0].size else np.empty((0, len(columns)), dtype=np.int64),
                     times, diffs)
    for column, kind in zip(columns, validator.kinds.tolist(), strict=True):
        if kind == ANY and not _hashable_in_range(column):
            return None
    return Block(RecordColumns(columns), times, diffs)


def _hashable_in_range(column: list) -> bool:
    """Whether every value of an untyped column is hashable and one that outputs can carry."""
    try:
        set(column)
    except TypeError:
        return False
    return column_in_range(column)


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
    return decode_objects(value, validator)


def decode_objects(value: bytes, validator: _Validator) -> Decoded:
    """The general path of `decode_input` (a message the column kernel does not take, any message
    of an input without declared fields): decoded by ``msgpack.unpackb`` into Python objects, a
    valid batch checked and kept column-wise, each bad update named."""
    try:
        obj = msgpack.unpackb(value, raw=False, use_list=False, strict_map_key=False)
    except Exception as exc:  # ExtraData, FormatError, StackError, ValueError, UnicodeDecodeError...
        return Decoded([], None, [Malformed("bad_msgpack", f"{type(exc).__name__}: {str(exc) or 'invalid msgpack'}")])
    if type(obj) is dict:
        if set(obj) != {"progress"}:
            return Decoded([], None, [Malformed("shape", f"a map with keys {sorted(map(str, obj))}, expected only 'progress'")])
        t = obj["progress"]
        if type(t) is not int or not T_MIN <= t <= T_MAX:
            return Decoded([], None, [Malformed("bad_progress", f"progress time {t!r} is not an int64 integer")])
        return Decoded([], t, None)
    if type(obj) is not tuple:
        return Decoded([], None, [Malformed("shape", f"a {type(obj).__name__} ({obj!r:.80}), expected an array or a map")])
    if len(obj) == 3 and type(obj[1]) is not tuple:
        checked = validator.check(obj, None)
        if type(checked) is Malformed:
            return Decoded([], None, [checked])
        return Decoded([checked], single=True)  # type: ignore[list-item]
    if not obj:
        return Decoded([])
    fast = validator.check_batch(obj)
    if fast is not None:
        datas, times, diffs = fast
        if type(times[0]) is not int:  # a reclocked input's nil times: its updates take their time later
            return Decoded(list(zip(datas, times, diffs)))
        return Decoded(block=Block(list(datas), np.array(times, dtype=np.int64), np.array(diffs, dtype=np.int64)))
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


def pack(obj: Any, what: str) -> bytes:
    """``obj`` as msgpack (tuples as arrays); `WireError` names ``what`` and the value otherwise."""
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"encoding {what}: {obj!r:.200} cannot be written as msgpack ({exc})") from exc


def encode_update(data: Any, time: int, diff: int) -> bytes:
    """One input update ``[data, time, diff]``."""
    return pack([data, time, diff], "an input update")


def encode_updates(updates: Iterable[tuple[Any, int, int]]) -> bytes:
    """A batch of input updates ``[[data, time, diff], ...]``."""
    return pack([[d, t, r] for d, t, r in updates], "a batch of input updates")


def encode_progress(time: int) -> bytes:
    """An input progress marker ``{"progress": time}``."""
    if type(time) is not int or not T_MIN <= time <= T_MAX:
        raise WireError(f"encoding a progress marker: time {time!r} is not an int64 integer")
    return pack({"progress": time}, "a progress marker")
