"""The debezium format: Debezium's JSON change-event envelope, in and out.

Input: one change event per message, with or without Kafka Connect's ``{"schema", "payload"}``
wrapper (``value.converter.schemas.enable`` true or false)::

    {"before": {...} | null, "after": {...} | null, "op": "c" | "r" | "u" | "d",
     "ts_ms": 1700000000000, "ts_us": ..., "ts_ns": ..., "source": {"ts_ms": ..., ...}}

``c`` (insert) and ``r`` (snapshot read) insert ``after``; ``d`` retracts ``before``; ``u``
retracts ``before`` and inserts ``after``, all at the event's time: ``ts_ns``, else ``ts_us``,
else ``ts_ms`` (scaled to nanoseconds) of the envelope, or of its ``source`` block (the
database's commit time) with ``debezium_time = "source"``. Rows give the declared fields (other columns
are ignored; ``bytes`` columns are base64, Debezium's default). A null value (the tombstone
Debezium writes after a delete, for log compaction) is skipped and counted, not an error.
Anything else is dead-lettered whole with its reason: ``bad_json``, ``shape`` (not an object),
``bad_event`` (no or unknown op, a missing ``before``/``after`` row for the op, no timestamp),
``missing_field``, ``field_type``, ``time_type``/``time_range``. Debezium sends no progress
markers: its inputs use the ``monotonic`` or ``reclock`` progress policy.

Output: change events a Kafka Connect sink can read, one per message, keyed by the record's key
fields (``{"page": "home"}``): at one time, a retraction and an insertion of the same key become
one ``u`` event (``before`` -> ``after``), other retractions ``d`` and insertions ``c`` events;
a diff of +-n gives n events. Events are in time order per partition, with ``ts_ns``, ``ts_us``
and ``ts_ms`` set from the update's time; the epoch's markers go to the companion progress topic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import WireError
from .rows import (
    Marker,
    RowEncoding,
    RowLayout,
    dumps,
    epoch_header,
    marker_message,
    parse,
    record_from_row,
    restamp,
    row_data,
)
from .schema import InputFormat
from .types import Decoded, Malformed, Message, Update

__all__ = ["DebeziumDecoder", "DebeziumEncoder", "DebeziumReader", "OPS"]

OPS = {"c": "insert", "r": "snapshot read", "u": "update", "d": "delete"}
_SCALES = (("ts_ns", 1), ("ts_us", 1_000), ("ts_ms", 1_000_000))
_NO_BEFORE = {
    "u": "op 'u' without a 'before' row: the old row cannot be retracted (the source table must send "
         "full before-images, e.g. REPLICA IDENTITY FULL in PostgreSQL)",
    "d": "op 'd' without a 'before' row: the deleted row cannot be retracted (the source table must send "
         "full before-images, e.g. REPLICA IDENTITY FULL in PostgreSQL)",
}


def _bad(reason: str, detail: str) -> Decoded:
    return Decoded([], None, [Malformed(reason, detail)])


class DebeziumDecoder:
    """Debezium change events -> updates (see the module docstring)."""

    name = "debezium"

    def __init__(self, fields: InputFormat, *, time_source: str = "envelope", time_required: bool = True) -> None:
        self.fields = fields
        self.time_source = time_source
        self.time_required = time_required

    def decode(self, value: bytes | None) -> Decoded:
        if value is None:
            return Decoded([], tombstone=True)
        event, bad = parse(value, self.fields)
        if bad is not None:
            return Decoded([], None, [bad])
        if type(event) is dict and "payload" in event and set(event) <= {"schema", "payload"}:
            event = event["payload"]
        if event is None:  # a null payload: a tombstone written with schemas enabled
            return Decoded([], tombstone=True)
        if type(event) is not dict:
            return _bad("shape", f"a JSON {type(event).__name__} ({event!r:.60}), expected a change event object")
        op = event.get("op")
        if op not in OPS:
            shown = "no 'op'" if "op" not in event else f"op {op!r:.20}"
            return _bad("bad_event", f"{shown}: expected one of c (insert), r (read), u (update), d (delete)")
        time = self._time(event)
        if type(time) is Malformed:
            return Decoded([], None, [time])
        rows: list[tuple[str, int]] = []
        if op in ("u", "d"):
            rows.append(("before", -1))
        if op != "d":
            rows.append(("after", 1))
        updates: list[tuple[Any, int | None, int]] = []
        for side, diff in rows:
            row = event.get(side)
            if type(row) is not dict:
                if row is None and side == "before":
                    return _bad("bad_event", _NO_BEFORE[op])
                what = "none" if side not in event else f"a JSON {type(row).__name__}"
                return _bad("bad_event", f"op {op!r} needs an '{side}' row (an object), the event has {what}")
            data = row_data(row, self.fields, f"the '{side}' row", None)
            if type(data) is Malformed:
                return Decoded([], None, [data])
            checked = self.fields.check((data, time, diff))
            if type(checked) is Malformed:
                detail = f"the '{side}' row: {checked.detail}"
                return _bad(checked.reason, detail)
            updates.append(checked)  # type: ignore[arg-type]
        return Decoded(updates, single=True)

    def _time(self, event: dict[str, Any]) -> int | None | Malformed:
        """The event's time in ns (None when the input is reclocked), or why there is none."""
        if not self.time_required:
            return None
        holder: Any = event
        where = "the envelope"
        if self.time_source == "source":
            holder, where = event.get("source"), "its 'source' block"
            if type(holder) is not dict:
                return Malformed("bad_event", "the event has no 'source' block to read its time from (debezium_time = 'source')")
        for name, scale in _SCALES:
            raw = holder.get(name)
            if raw is None:
                continue
            if type(raw) is not int:
                return Malformed("time_type", f"{name} {raw!r:.40} in {where} is not an integer")
            t = raw * scale
            if not T_MIN <= t <= T_MAX:
                return Malformed("time_range", f"{name} {raw} in {where} is outside int64 nanoseconds")
            return t
        return Malformed("bad_event", f"no ts_ns, ts_us or ts_ms in {where}")


class DebeziumEncoder(RowEncoding):
    """Output updates -> Debezium change events (see the module docstring)."""

    name = "debezium"

    def __init__(self, layout: RowLayout, progress_topic: str) -> None:
        self.layout = layout
        self.topic = layout.topic
        self.progress_topic = progress_topic
        self._schema: dict[str, Any] | None = None
        if layout.schemas:
            assert layout.names is not None
            row = f"{layout.topic}.Value"
            times = [{"type": "int64", "optional": True, "field": f} for f in ("ts_ms", "ts_us", "ts_ns")]
            source = {"type": "struct", "optional": False, "name": "ddflow.Source", "field": "source",
                      "fields": [{"type": "string", "optional": False, "field": "connector"},
                                 {"type": "string", "optional": False, "field": "name"}, *times]}
            self._schema = {
                "type": "struct", "optional": False, "name": f"{layout.topic}.Envelope", "fields": [
                    layout.struct(row, layout.names, optional=True, field="before"),
                    layout.struct(row, layout.names, optional=True, field="after"),
                    source, {"type": "string", "optional": False, "field": "op"}, *times,
                ],
            }

    def partition(self, record: Any, partitions: int) -> int:
        return self.layout.partition(record, partitions)

    def event(self, op: str, before: Any, after: Any, time: int) -> bytes:
        layout = self.layout
        ts = {"ts_ms": time // 1_000_000, "ts_us": time // 1_000, "ts_ns": time}
        envelope = {
            "before": None if before is None else layout.row(before),
            "after": None if after is None else layout.row(after),
            "source": {"connector": "ddflow", "name": layout.output, **ts},
            "op": op,
            **ts,
        }
        return dumps(envelope if self._schema is None else {"schema": self._schema, "payload": envelope})

    def events(self, updates: Sequence[Update]) -> list[tuple[bytes, bytes]]:
        """(key, value) of each change event of ``updates``, in time then key order."""
        key_of = self.layout.key
        groups: dict[tuple[int, bytes], tuple[list[Any], list[Any]]] = {}
        for record, time, diff in updates:
            gone, came = groups.setdefault((time, key_of(record)), ([], []))
            (gone if diff < 0 else came).extend([record] * abs(diff))
        out = []
        order = self._order
        for (time, key), (gone, came) in sorted(groups.items(), key=lambda g: g[0]):
            gone.sort(key=order)
            came.sort(key=order)
            paired = min(len(gone), len(came))
            for before, after in zip(gone, came):
                out.append((key, self.event("u", before, after, time)))
            out.extend((key, self.event("d", before, None, time)) for before in gone[paired:])
            out.extend((key, self.event("c", None, after, time)) for after in came[paired:])
        return out

    def _order(self, record: Any) -> bytes:
        return dumps(self.layout.row(record))

    def epoch(
        self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Update],
        writer: tuple[int, int] | None = None,
    ) -> tuple[list[Message], Message]:
        header = epoch_header(lower, upper, incarnation)
        data: list[Message] = [(self.topic, partition, key, value, header) for key, value in self.events(updates)]
        marker = Marker(self.topic, partition, lower, upper, incarnation, len(data), *(writer or (0, 1)))
        return data, marker_message(self.progress_topic, marker)

    def restamp(self, message: Message, incarnation: str) -> Message:
        return restamp(message, self.progress_topic, incarnation)


class DebeziumReader:
    """The updates of one change event on a debezium output (the result client's side)."""

    def __init__(self, fields: Sequence[str] | Mapping[str, str] | None = None) -> None:
        self.names = None if fields is None else tuple(fields)
        self.types = tuple(fields.values()) if isinstance(fields, Mapping) else None

    def updates(self, value: bytes | None) -> list[Update]:
        try:
            event = json.loads(value or b"")
        except ValueError as exc:
            raise WireError(f"a debezium output message {value!r:.80} is not JSON ({exc})") from None
        if type(event) is dict and set(event) == {"schema", "payload"}:
            event = event["payload"]
        if type(event) is not dict or event.get("op") not in OPS or type(event.get("ts_ns")) is not int:
            raise WireError(f"a debezium output message {value!r:.80} is not a change event with ts_ns")
        time, op = event["ts_ns"], event["op"]
        out: list[Update] = []
        if op in ("u", "d"):
            out.append((record_from_row(event.get("before"), self.names, self.types), time, -1))
        if op != "d":
            out.append((record_from_row(event.get("after"), self.names, self.types), time, 1))
        return out
