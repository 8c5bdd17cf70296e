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

Output: change events a Debezium consumer reads as its own, one per message, keyed by the
record's key fields (``{"page": "home"}``): at one time, a retraction and an insertion of the same
key become one ``u`` event (``before`` -> ``after``), other retractions ``d`` and insertions ``c``
events; a diff of +-n gives n events. The epoch that publishes the snapshot a worker started from
(a backfill or a checkpoint: ``[MIN_TIME, F)``, the output accumulated at the snapshot's frontier
``F``) is a snapshot as Debezium's are: its insertions are ``r`` (read) events, and its events
have ``source.snapshot = "true"``. Each event carries, as Debezium's do:

* ``ts_ms``/``ts_us``/``ts_ns``: the update's time;
* ``source``: ``version`` (ddflow's), ``connector`` (``"ddflow"``), ``name`` (the daemon's logical
  name: its consumer group), ``ts_ms``/``ts_us``/``ts_ns``, ``snapshot`` (``"true"``/``"false"``),
  ``db`` (the dataflow, ``module:function``) and ``table`` (the output's name);
* ``transaction``: the epoch is the transaction (its updates commit together): ``id`` is
  ``"lower:upper"``, ``total_order`` and ``data_collection_order`` the event's place (from 1)
  among the epoch's events of this output on this partition (Kafka orders nothing across
  partitions; the epoch's progress marker counts them, as Debezium's transaction END event does).

After each ``d`` event a tombstone follows (the same key, a null value), as Debezium writes for
log compaction and the JDBC sink's delete handling (``tombstones = false`` leaves them out).
Schema names (with ``schemas``) are Avro names: ``<topic>.Envelope``/``.Value``/``.Key`` with every
character outside ``[A-Za-z0-9_]`` of the topic made ``_`` (Debezium's own adjustment), the source
block ``io.debezium.connector.ddflow.Source`` and the transaction block ``event.block``. The
epoch's markers go to the companion progress topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import WireError
from .epochs import Marker, epoch_header, marker_message, output_json, restamp
from .rows import RowEncoding, RowLayout, dumps, parse, record_from_row, row_data
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


def ddflow_version() -> str:
    """The installed ddflow's version (what change events name as their source's version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ddflow")
    except PackageNotFoundError:
        return "0+unknown"


class DebeziumEncoder(RowEncoding):
    """Output updates -> Debezium change events (see the module docstring). ``source``: the
    ``name`` and ``db`` of the events' source block; ``tombstones``: a tombstone after each delete."""

    name = "debezium"

    def __init__(self, layout: RowLayout, progress_topic: str, *, source: Mapping[str, str] | None = None,
                 tombstones: bool = True) -> None:
        self.layout = layout
        self.topic = layout.topic
        self.progress_topic = progress_topic
        self.tombstones = bool(tombstones)
        given = dict(source or {})
        self.source = {"version": ddflow_version(), "connector": "ddflow", "name": given.get("name", "ddflow"),
                       "db": given.get("db", ""), "table": layout.output}
        self._schema: dict[str, Any] | None = None
        if layout.schemas:
            assert layout.names is not None
            row = f"{layout.schema_name}.Value"
            times = [{"type": "int64", "optional": True, "field": f} for f in ("ts_ms", "ts_us", "ts_ns")]
            string = {"type": "string", "optional": False}
            source_schema = {
                "type": "struct", "optional": False, "name": "io.debezium.connector.ddflow.Source", "field": "source",
                "fields": [{**string, "field": "version"}, {**string, "field": "connector"}, {**string, "field": "name"},
                           {"type": "int64", "optional": False, "field": "ts_ms"}, *times[1:],
                           {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
                            "parameters": {"allowed": "true,false"}, "default": "false", "field": "snapshot"},
                           {**string, "field": "db"}, {**string, "field": "table"}]}
            transaction = {"type": "struct", "optional": True, "name": "event.block", "version": 1,
                           "field": "transaction",
                           "fields": [{**string, "field": "id"},
                                      {"type": "int64", "optional": False, "field": "total_order"},
                                      {"type": "int64", "optional": False, "field": "data_collection_order"}]}
            self._schema = {
                "type": "struct", "optional": False, "name": f"{layout.schema_name}.Envelope", "version": 1,
                "fields": [
                    layout.struct(row, layout.names, optional=True, field="before"),
                    layout.struct(row, layout.names, optional=True, field="after"),
                    source_schema, {**string, "field": "op"}, *times, transaction,
                ],
            }

    def partition(self, record: Any, partitions: int) -> int:
        return self.layout.partition(record, partitions)

    def event(self, op: str, before: Any, after: Any, time: int, *, snapshot: bool = False,
              transaction: dict[str, Any] | None = None) -> bytes:
        """One change event's value (``transaction``: the event's block, None for none)."""
        layout = self.layout
        ts = {"ts_ms": time // 1_000_000, "ts_us": time // 1_000, "ts_ns": time}
        source = self.source
        envelope = {
            "before": None if before is None else layout.row(before),
            "after": None if after is None else layout.row(after),
            "source": {"version": source["version"], "connector": "ddflow", "name": source["name"], **ts,
                       "snapshot": "true" if snapshot else "false", "db": source["db"], "table": source["table"]},
            "op": op,
            **ts,
            "transaction": transaction,
        }
        return dumps(envelope if self._schema is None else {"schema": self._schema, "payload": envelope})

    def events(self, updates: Sequence[Update], lower: int = T_MIN, upper: int | None = None, *,
               snapshot: bool = False) -> list[tuple[bytes, bytes | None]]:
        """(key, value) of each change event of ``updates`` of epoch ``[lower, upper)``, in time then
        key order, each ``d`` event followed by its tombstone (value None) when they are on;
        ``snapshot``: the epoch publishes a snapshot's contents (insertions are ``r`` events)."""
        key_of = self.layout.key
        groups: dict[tuple[int, bytes], tuple[list[Any], list[Any]]] = {}
        for record, time, diff in updates:
            gone, came = groups.setdefault((time, key_of(record)), ([], []))
            (gone if diff < 0 else came).extend([record] * abs(diff))
        changes: list[tuple[bytes, str, Any, Any, int]] = []
        order = self._order
        for (time, key), (gone, came) in sorted(groups.items(), key=lambda g: g[0]):
            gone.sort(key=order)
            came.sort(key=order)
            paired = min(len(gone), len(came))
            changes.extend((key, "u", before, after, time) for before, after in zip(gone, came))
            changes.extend((key, "d", before, None, time) for before in gone[paired:])
            changes.extend((key, "c", None, after, time) for after in came[paired:])
        tid = f"{lower}:{'' if upper is None else upper}"
        out: list[tuple[bytes, bytes | None]] = []
        for n, (key, op, before, after, time) in enumerate(changes, start=1):
            block = {"id": tid, "total_order": n, "data_collection_order": n}
            out.append((key, self.event("r" if snapshot and op == "c" else op, before, after, time,
                                        snapshot=snapshot, transaction=block)))
            if op == "d" and self.tombstones:
                out.append((key, None))
        return out

    def _order(self, record: Any) -> bytes:
        return dumps(self.layout.row(record))

    def epoch(
        self, lower: int, upper: int | None, incarnation: str, partition: int, updates: Sequence[Update],
        writer: tuple[int, int] | None = None, *, snapshot: bool = False,
    ) -> tuple[list[Message], Message]:
        header = epoch_header(lower, upper, incarnation)
        data: list[Message] = [(self.topic, partition, key, value, header)
                               for key, value in self.events(updates, lower, upper, snapshot=snapshot)]
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
        """The updates of one data message: none for a tombstone (null value)."""
        if value is None:
            return []
        event = output_json(value, "a debezium output message")
        if type(event) is not dict or event.get("op") not in OPS or type(event.get("ts_ns")) is not int:
            raise WireError(f"a debezium output message {value!r:.80} is not a change event with ts_ns")
        time, op = event["ts_ns"], event["op"]
        out: list[Update] = []
        if op in ("u", "d"):
            out.append((record_from_row(event.get("before"), self.names, self.types), time, -1))
        if op != "d":
            out.append((record_from_row(event.get("after"), self.names, self.types), time, 1))
        return out
