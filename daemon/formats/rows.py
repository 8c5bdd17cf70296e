"""What the JSON-based formats share: parsing, rows <-> records, keys, Connect schemas (their
epochs' header and markers: `epochs`).

* Parsing: a message value is one JSON document (UTF-8), refused when `json` cannot read it or an
  object repeats a key (reason ``bad_json``). ``NaN``, ``Infinity`` and numbers past a double's
  range (``1e400``) read as the non-finite floats they spell, which no record may hold: an update
  with one in its data is refused with ``field_range`` (see `ranges`), whatever the spelling.
* Rows: an input row (a JSON object) gives the record's fields in declared order; extra columns
  are ignored (a table or event may carry more than the dataflow reads); a ``bytes`` field is
  a base64 string, as Kafka Connect's JSON converter writes binary columns; JSON arrays become
  tuples. An output record becomes an object with the declared field names (a single-field
  output's record is the field's value; tuples become arrays, bytes base64 strings).
* Keys: the record's key fields as a JSON object (``{"page": "home"}``), the message key of every
  change event; a record's data partition is the stable key hash of its key fields' values (one
  field: its value; by default the first field, as for every other partitioned record), so all
  changes of one key are on one partition, in time order.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...operators.partition import key_hash, partition_of
from ..block import Block
from ..exceptions import OptionsError, WireError
from .partitioners import PARTITIONERS, kafka_partition
from .schema import InputFormat
from .types import Malformed, Message, to_record

__all__ = [
    "avro_name",
    "RowEncoding",
    "RowLayout",
    "parse",
    "row_data",
    "dumps",
    "record_from_row",
]

CONNECT_TYPES = {"int": "int64", "float": "float64", "str": "string", "bytes": "bytes", "bool": "boolean"}


def _constant(name: str) -> float:
    """``NaN``, ``Infinity`` and ``-Infinity`` (not JSON, but written by many encoders) as the floats
    they spell: a value holding one is then refused like ``1e400``, which Python reads as infinity
    (reason ``field_range``, see `ranges`), whatever the spelling."""
    return float(name)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refused when a key repeats (which of its values would hold is a guess)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r:.60} appears twice in one object")
            seen.add(key)
    return obj


def parse(value: bytes | None, fields: InputFormat) -> tuple[Any, Malformed | None]:
    """The JSON document of an input message value, or why it is not one (``empty``,
    ``oversized``, ``bad_json``). A null value is returned as None with no error (the caller
    decides whether it is a tombstone or empty)."""
    if value is None:
        return None, None
    if not value:
        return None, Malformed("empty", "the message value is empty (zero bytes)")
    if len(value) > fields.max_message_bytes:
        return None, Malformed("oversized", f"{len(value)} bytes > max_message_bytes {fields.max_message_bytes}")
    try:
        return json.loads(value, parse_constant=_constant, object_pairs_hook=_object), None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, digit limits
        return None, Malformed("bad_json", f"{type(exc).__name__}: {exc}")


def _base64(value: Any, name: str) -> Any:
    """A base64 string as bytes (Kafka Connect's JSON for binary columns); else unchanged, so
    that the type check reports it."""
    if type(value) is not str:
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TypeError(f"field {name!r} = {value!r:.60} is not base64 ({exc})") from None


def row_data(row: Mapping[str, Any], fields: InputFormat, what: str, index: int | None) -> tuple[Any, ...] | Malformed:
    """The data tuple of ``row`` (a JSON object) in declared field order, values converted for
    the engine (arrays -> tuples, base64 -> bytes for ``bytes`` fields); type checks are left
    to `InputFormat.check`. ``what`` names the row in details ("the 'after' row")."""
    names = fields.field_names
    if names is None:  # no declared fields: every column, in the row's order
        return tuple(to_record(v) for v in row.values())
    types = fields.field_types or ()
    data = []
    for name, kind in zip(names, types):
        if name not in row:
            shown = ", ".join(map(str, list(row)[:20]))
            return Malformed("missing_field", f"{what} has no field {name!r} (it has: {shown})", index)
        value = row[name]
        if kind == "bytes":
            try:
                value = _base64(value, name)
            except TypeError as exc:
                return Malformed("field_type", str(exc), index)
        data.append(to_record(value))
    return tuple(data)


def dumps(obj: Any) -> bytes:
    """Compact JSON, keys in insertion order (deterministic for equal inputs)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _json_value(value: Any, where: str) -> Any:
    """An engine value as JSON: tuples -> arrays, bytes -> base64; WireError if not writable."""
    kind = type(value)
    if kind is int or kind is str or kind is bool or value is None:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise WireError(f"{where}: {value!r} cannot be written as JSON (not a finite number)")
        return value
    if kind is tuple or kind is list:
        return [_json_value(v, where) for v in value]
    if kind is bytes:
        return base64.b64encode(value).decode("ascii")
    raise WireError(f"{where}: a {kind.__name__} ({value!r:.80}) cannot be written as JSON")


class RowLayout:
    """How the records of one json/debezium output become rows, keys and partitions.

    ``fields``: the record's field names (or name -> type); required by debezium, optional for
    json (without them an update is written ``[data, time, diff]``). ``key``: the key fields
    (default: the first field). ``schemas``: wrap values and keys in Kafka Connect's
    ``{"schema", "payload"}`` (needs a type other than ``any`` for every field)."""

    def __init__(
        self,
        output: str,
        topic: str,
        fields: Sequence[str] | Mapping[str, str] | None,
        key: Sequence[str] | None,
        *,
        schemas: bool,
        format: str,
        partitioner: str = "ddflow",
    ) -> None:
        where = f"output {output!r}"
        self.output, self.topic, self.schemas = output, topic, bool(schemas)
        self.schema_name = avro_name(topic)
        if partitioner not in PARTITIONERS:
            raise OptionsError(f"{where} partitioner: {partitioner!r} is not one of {', '.join(PARTITIONERS)}")
        self.partitioner = partitioner
        if fields is not None:
            shape = InputFormat(fields)  # validates names and types like an input's
            self.names: tuple[str, ...] | None = shape.field_names
            self.types: tuple[str, ...] | None = shape.field_types
        else:
            self.names = self.types = None
        if self.names is None:
            if format == "debezium":
                raise OptionsError(f"{where} fields: a debezium output needs the record's field names")
            if key:
                raise OptionsError(f"{where} key: name the record's fields first (fields)")
            if schemas:
                raise OptionsError(f"{where} schemas: needs typed fields")
            self.key_positions: tuple[int, ...] = ()
            return
        key = list(key) if key else [self.names[0]]
        unknown = [k for k in key if k not in self.names]
        if unknown or len(set(key)) != len(key):
            raise OptionsError(f"{where} key: {key!r} must name distinct fields of {list(self.names)}")
        self.key_positions = tuple(self.names.index(k) for k in key)
        if schemas:
            untyped = [n for n, t in zip(self.names, self.types or ()) if t == "any"]
            if untyped:
                raise OptionsError(f"{where} schemas: fields {untyped} need a type (int, float, str, bytes, bool)")
        if format == "json" and {"time", "diff"} & set(self.names):
            raise OptionsError(f"{where} fields: 'time' and 'diff' are the update's own keys in the json format")

    # -- records ---------------------------------------------------------------------------------

    def values(self, record: Any) -> tuple[Any, ...]:
        """The record's field values in order (a single-field record is its value)."""
        assert self.names is not None
        if len(self.names) == 1:
            return (record,)
        if type(record) is not tuple or len(record) != len(self.names):
            raise WireError(f"output {self.output!r}: record {record!r:.120} is not a tuple of {len(self.names)} "
                            f"values ({', '.join(self.names)})")
        return record

    def row(self, record: Any) -> dict[str, Any]:
        """The record as a JSON object of its declared fields."""
        assert self.names is not None
        where = f"output {self.output!r} record {record!r:.80}"
        return {n: _json_value(v, where) for n, v in zip(self.names, self.values(record))}

    def plain(self, record: Any) -> Any:
        """The record as a JSON value (tuples as arrays): the data of an output without fields."""
        return _json_value(record, f"output {self.output!r} record {record!r:.80}")

    def key(self, record: Any) -> bytes:
        """The message key: the key fields as an object (the whole record without fields)."""
        if self.names is None:
            key: Any = self.plain(record)
        else:
            values = self.values(record)
            where = f"output {self.output!r} record {record!r:.80}"
            key = {self.names[i]: _json_value(values[i], where) for i in self.key_positions}
            if self.schemas:
                key = {"schema": self.struct(f"{self.schema_name}.Key", [self.names[i] for i in self.key_positions],
                                             optional=False), "payload": key}
        return dumps(key)

    def partition(self, record: Any, partitions: int) -> int:
        """The data partition of ``record``: with the ``murmur2`` partitioner, Kafka's default
        partitioner over its message key (`key`); else ``key_hash`` of its key fields' values (one
        field: its value), or of its first field when the output has no fields."""
        if self.partitioner == "murmur2":
            return kafka_partition(self.key(record), partitions)
        if self.names is None:
            return partition_of(record, partitions)
        values = self.values(record)
        if len(self.key_positions) == 1:
            return key_hash(values[self.key_positions[0]]) % partitions
        return key_hash(tuple(values[i] for i in self.key_positions)) % partitions

    # -- Kafka Connect schemas -------------------------------------------------------------------

    def field_schema(self, name: str) -> dict[str, Any]:
        assert self.names is not None and self.types is not None
        kind = self.types[self.names.index(name)]
        return {"type": CONNECT_TYPES[kind], "optional": False, "field": name}

    def struct(self, name: str, fields: Sequence[str], *, optional: bool, field: str | None = None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "struct", "fields": [self.field_schema(f) for f in fields],
                                  "optional": optional, "name": name}
        if field is not None:
            schema["field"] = field
        return schema


def avro_name(topic: str) -> str:
    """``topic`` as an Avro (and Kafka Connect) schema name: each dot-separated part with every
    character outside ``[A-Za-z0-9_]`` made ``_``, and ``_`` before a part that starts with a digit
    (what Debezium's schema name adjuster does)."""
    parts = []
    for part in topic.split("."):
        clean = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in part) or "_"
        parts.append("_" + clean if clean[0].isdigit() else clean)
    return ".".join(parts)


def record_from_row(row: Any, names: Sequence[str] | None, types: Sequence[str] | None, skip: tuple[str, ...] = ()) -> Any:
    """The record a result row stands for: its fields' values in ``names`` order (the row's own
    order without names, ``skip`` left out), a tuple for several fields, the value for one."""
    if type(row) is not dict:
        raise WireError(f"a row must be a JSON object, got {type(row).__name__}")
    if names is None:
        values = [to_record(v) for k, v in row.items() if k not in skip]
    else:
        try:
            values = [to_record(row[n]) for n in names]
        except KeyError as exc:
            raise WireError(f"row {row!r:.120} has no field {exc.args[0]!r}") from None
        if types is not None:
            values = [base64.b64decode(v) if t == "bytes" and type(v) is str else v for v, t in zip(values, types)]
    return values[0] if len(values) == 1 else tuple(values)


class RowEncoding:
    """What an encoder writing one message per update does with an epoch given as a `block.Block`:
    its rows, one at a time (`partition`, `epoch`)."""

    def partition(self, record: Any, partitions: int) -> int:
        raise NotImplementedError

    def epoch(self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Any],
              writer: tuple[int, int] | None = None, *, snapshot: bool = False) -> tuple[list[Message], Message]:
        raise NotImplementedError

    def partitions(self, block: Block, partitions: int) -> np.ndarray:
        """The data partition of each update of ``block``."""
        return np.fromiter((self.partition(r, partitions) for r in block.record_list()), dtype=np.int64,
                           count=len(block))

    def epoch_block(self, lower: int, upper: int | None, incarnation: str, partition: int, block: Block,
                    writer: tuple[int, int] | None = None, *, snapshot: bool = False) -> tuple[list[Message], Message]:
        """`epoch` of the block's rows."""
        return self.epoch(lower, upper, incarnation, partition, block.rows(), writer, snapshot=snapshot)
