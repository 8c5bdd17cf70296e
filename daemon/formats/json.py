"""The json format: updates as JSON, for services that write JSON to Kafka.

Input message values (one JSON document each, UTF-8):

* an update ``[data, time_ns, diff]`` (``data`` an array with one value per declared field), or an
  object with the declared field names plus ``time`` and ``diff``:
  ``{"user": 7, "page": "home", "time": 1700000000000000000, "diff": 1}`` (other keys ignored);
* a batch: an array of updates (either form; a value is one array update exactly when it has
  three elements and its second is neither an array nor an object);
* a progress marker ``{"progress": time_ns}`` (as in msgpack).

``bytes`` fields are base64 strings. Each bad update is reported with its reason and position in
the batch (`types.REASONS`); the others are kept.

Output data messages: one update per message, an object with the declared fields plus ``time``
and ``diff`` (``[data, time, diff]`` without declared fields), optionally in Kafka Connect's
``{"schema", "payload"}`` wrapper; the key is the record's key fields; the epoch's markers go to
the companion progress topic (see `rows`). That is the change log (``mode = "changelog"``, the
default).

With ``mode = "upsert"`` the topic is a table instead, what an upsert sink (Kafka Connect's JDBC
sink with ``insert.mode=upsert`` and ``delete.enabled=true``, a compacted topic, a KTable) reads:
per epoch, one message for each key whose row changed, keyed by the key fields, whose value is the
row as of the epoch's end (the record's fields, no ``time`` or ``diff``), or a tombstone (a null
value) when the key's row left. Messages are in key order. It needs an output that holds at most
one record per key at every time (a reduction keyed by the key fields, say): an epoch whose
changes leave a key with more than one record, or with a multiplicity other than one, is refused
with a `WireError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ...operators.input import RecordColumns
from ...operators.lattice import T_MAX, T_MIN
from ..block import Block
from ..exceptions import OptionsError, WireError
from .epochs import Marker, epoch_header, marker_message, output_json, restamp
from .rows import RowEncoding, RowLayout, dumps, parse, record_from_row, row_data
from .schema import InputFormat
from .types import Decoded, Malformed, Message, Update, to_record

__all__ = ["MODES", "JsonDecoder", "JsonEncoder", "JsonReader"]

MODES = ("changelog", "upsert")


class JsonDecoder:
    """Input messages in JSON (see the module docstring)."""

    name = "json"

    def __init__(self, fields: InputFormat) -> None:
        self.fields = fields

    def decode(self, value: bytes | None) -> Decoded:
        if value is None:
            return Decoded([], None, [Malformed("empty", "the message value is null")])
        obj, bad = parse(value, self.fields)
        if bad is not None:
            return Decoded([], None, [bad])
        if type(obj) is dict:
            if "progress" in obj and len(obj) == 1:
                t = obj["progress"]
                if type(t) is not int or not T_MIN <= t <= T_MAX:
                    return Decoded([], None, [Malformed("bad_progress", f"progress time {t!r:.40} is not an int64 integer")])
                return Decoded([], t, None)
            checked = self._check(obj, None)
            if type(checked) is Malformed:
                return Decoded([], None, [checked])
            return Decoded([checked], single=True)  # type: ignore[list-item]
        if type(obj) is not list:
            return Decoded([], None, [Malformed("shape", f"a JSON {_kind(obj)} ({obj!r:.60}), expected an update "
                                                "(array or object), a batch or a progress marker")])
        if len(obj) == 3 and type(obj[1]) is not list and type(obj[1]) is not dict:
            checked = self._check(obj, None)
            if type(checked) is Malformed:
                return Decoded([], None, [checked])
            return Decoded([checked], single=True)  # type: ignore[list-item]
        block = _batch_block(obj, self.fields) if obj else None
        if block is not None:
            return Decoded(block=block)
        updates: list[tuple[Any, int | None, int]] = []
        indexes: list[int] = []
        malformed: list[Malformed] = []
        for i, item in enumerate(obj):
            checked = self._check(item, i)
            if type(checked) is Malformed:
                malformed.append(checked)  # type: ignore[arg-type]
            else:
                updates.append(checked)  # type: ignore[arg-type]
                indexes.append(i)
        return Decoded(updates, None, malformed or None, indexes if malformed else None)

    def _check(self, item: Any, index: int | None) -> tuple[Any, int | None, int] | Malformed:
        fields = self.fields
        if type(item) is dict:
            if fields.field_names is None:
                return Malformed("shape", "an object update needs the input's declared fields", index)
            data = row_data(item, fields, "the update", index)
            if type(data) is Malformed:
                return data
            for key in ("time", "diff"):
                if key not in item and (key == "diff" or fields.time_required):
                    return Malformed("missing_field", f"the update has no {key!r}", index)
            return fields.check((data, item.get("time"), item["diff"]), index)
        if type(item) is not list or len(item) != 3:
            what = f"an array of {len(item)}" if type(item) is list else f"a JSON {_kind(item)}"
            return Malformed("arity", f"expected [data, time, diff] or an object, got {what}", index)
        data, time, diff = item
        if type(data) is list and fields.field_types is not None and "bytes" in fields.field_types:
            # base64 strings of bytes fields, converted through the same path as object rows
            names = fields.field_names or ()
            if len(data) == len(names):
                named = dict(zip(names, data))
                converted = row_data(named, fields, "the update's data", index)
                if type(converted) is Malformed:
                    return converted
                return fields.check((converted, time, diff), index)
        return fields.check((to_record(data) if type(data) is list else data, time, diff), index)


def _kind(obj: Any) -> str:
    return {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null",
            list: "array", dict: "object"}.get(type(obj), type(obj).__name__)


def _batch_block(items: list, fields: InputFormat) -> Block | None:
    """A batch whose updates are all valid, as a column block (fields taken out of every update
    and checked column by column at C speed: no row per update), else None, and each update is
    checked on its own (which names the bad ones). Updates all arrays, or all objects of an input
    with declared fields; an input with ``bytes`` fields (base64) and updates without a time (a
    reclocked input's) take the other path."""
    names, types = fields.field_names, fields.field_types
    validator = fields._validator  # type: ignore[attr-defined]
    if types is not None and "bytes" in types:
        return None
    shapes = set(map(type, items))
    if shapes == {list}:
        if set(map(len, items)) != {3}:
            return None
        datas, times, diffs = zip(*items)
        if set(map(type, datas)) != {list} or names is not None and set(map(len, datas)) != {len(names)}:
            return None
        columns: list = list(zip(*datas)) if names is not None else []
    elif shapes == {dict} and names is not None:
        try:
            columns = [list(map(itemgetter(name), items)) for name in names]
            times, diffs = list(map(itemgetter("time"), items)), list(map(itemgetter("diff"), items))
        except KeyError:
            return None
    else:
        return None
    if type(times[0]) is not int or not validator.check_times(times, diffs):
        return None
    if names is None:  # the records are the data arrays, as tuples
        records: Any = list(map(to_record, datas))
        if not validator.check_records(records):
            return None
    else:
        columns = [list(map(to_record, c)) if list in set(map(type, c)) else c for c in columns]
        checked = validator.check_columns(columns)
        if checked is None:
            return None
        records = RecordColumns([list(c) for c in checked])
    return Block(records, np.array(times, dtype=np.int64), np.array(diffs, dtype=np.int64))


class JsonEncoder(RowEncoding):
    """One message per output update, keyed by the record's key fields."""

    name = "json"

    def __init__(self, layout: RowLayout, progress_topic: str, *, mode: str = "changelog") -> None:
        if mode not in MODES:
            raise OptionsError(f"output {layout.output!r} mode: {mode!r} is not one of {', '.join(MODES)}")
        if mode == "upsert" and layout.names is None:
            raise OptionsError(f"output {layout.output!r} mode: an upsert output needs the record's fields")
        self.layout = layout
        self.mode = mode
        self.topic = layout.topic
        self.progress_topic = progress_topic
        self._schema: dict[str, Any] | None = None
        if layout.schemas and layout.names is not None:
            schema = layout.struct(f"{layout.schema_name}.Value", layout.names, optional=False)
            if mode == "changelog":
                schema["fields"] += [{"type": "int64", "optional": False, "field": "time"},
                                     {"type": "int64", "optional": False, "field": "diff"}]
            self._schema = schema

    def partition(self, record: Any, partitions: int) -> int:
        return self.layout.partition(record, partitions)

    def value(self, record: Any, time: int, diff: int) -> bytes:
        layout = self.layout
        if layout.names is None:
            return dumps([layout.plain(record), time, diff])
        row: dict[str, Any] = layout.row(record)
        row["time"], row["diff"] = time, diff
        return dumps(row if self._schema is None else {"schema": self._schema, "payload": row})

    def epoch(
        self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Update],
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
    ) -> tuple[list[Message], Message]:
        header = epoch_header(lower, upper, incarnation)
        if self.mode == "upsert":
            data: list[Message] = [(self.topic, partition, key, value, header) for key, value in self.upserts(updates)]
        else:
            data = [(self.topic, partition, self.layout.key(record), self.value(record, time, diff), header)
                    for record, time, diff in sorted(updates, key=lambda u: u[1])]
        marker = Marker(self.topic, partition, lower, upper, incarnation, len(data), *(writer or (0, 1)))
        return data, marker_message(self.progress_topic, marker)

    def upserts(self, updates: Sequence[Update]) -> list[tuple[bytes, bytes | None]]:
        """(key, row or None) for each key whose row the epoch's ``updates`` changed, in key order
        (see the module); WireError when a key would hold other than one record."""
        net: dict[bytes, dict[Any, int]] = {}
        key_of = self.layout.key
        for record, _time, diff in updates:
            records = net.setdefault(key_of(record), {})
            records[record] = records.get(record, 0) + diff
        out: list[tuple[bytes, bytes | None]] = []
        for key in sorted(net):
            changed = {r: d for r, d in net[key].items() if d}
            came = [r for r, d in changed.items() if d > 0]
            gone = [r for r, d in changed.items() if d < 0]
            if not changed:
                continue
            if len(came) > 1 or len(gone) > 1 or any(abs(d) != 1 for d in changed.values()):
                raise WireError(f"output {self.layout.output!r} (mode upsert): key {key.decode()} changes by "
                                f"{sorted(changed.items(), key=repr)!r:.200} in one epoch; an upsert output must "
                                "hold at most one record per key (key the output by its key fields)")
            if came:
                row = self.layout.row(came[0])
                out.append((key, dumps(row if self._schema is None else {"schema": self._schema, "payload": row})))
            else:
                out.append((key, None))
        return out

    def restamp(self, message: Message, incarnation: str) -> Message:
        return restamp(message, self.progress_topic, incarnation)


class JsonReader:
    """The updates of a json output's data message (the result client's side)."""

    def __init__(self, fields: Sequence[str] | Mapping[str, str] | None = None) -> None:
        self.names = None if fields is None else tuple(fields)
        self.types = tuple(fields.values()) if isinstance(fields, Mapping) else None

    def updates(self, value: bytes | None) -> list[Update]:
        obj = output_json(value, "a json output message")
        if type(obj) is list and len(obj) == 3:
            data, time, diff = obj
            record = to_record(data)
        elif type(obj) is dict and "time" in obj and "diff" in obj:
            record = record_from_row(obj, self.names, self.types, skip=("time", "diff"))
            time, diff = obj["time"], obj["diff"]
        else:
            raise WireError(f"a json output message {value!r:.80} is not an update")
        if type(time) is not int or type(diff) is not int:
            raise WireError(f"a json output message {value!r:.80} has a time or diff that is not an integer")
        return [(record, time, diff)]
