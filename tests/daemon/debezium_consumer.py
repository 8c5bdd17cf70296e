"""A consumer of Debezium change events, written from Debezium's documented event format (the
"Data change events" chapter of each connector's documentation) and nothing of ddflow's: what a
Debezium sink or stream processor relies on, checked strictly, then applied to a table.

Per message (key and value JSON, with or without Kafka Connect's ``schema``/``payload`` wrapper):

* a null value is a tombstone: it must follow a delete event with the same key;
* the value's payload has ``op`` (``c`` create, ``r`` snapshot read, ``u`` update, ``d`` delete),
  ``before`` (null for ``c``/``r``) and ``after`` (null for ``d``), ``ts_ms``, and a ``source`` block
  with at least ``version``, ``connector``, ``name``, ``ts_ms``, ``snapshot`` (``true``, ``last``,
  ``false``, ``first``, ``first_in_data_collection``, ``last_in_data_collection``, ``incremental``),
  ``db`` and ``table``; a ``transaction`` block, when present, has ``id`` (a string),
  ``total_order`` and ``data_collection_order`` (positive, increasing within one id);
* schemas, when present, are Kafka Connect structs whose ``name``s are Avro full names (dotted
  parts of ``[A-Za-z_][A-Za-z0-9_]*``), the envelope's fields ``before``/``after`` of the row
  schema, ``source``, ``op``, ``ts_ms`` and the ``transaction`` struct ``event.block``.

`Table.apply` keeps the rows by key as an upsert sink does (``c``/``r``/``u`` write ``after``,
``d`` deletes the row, a tombstone deletes the key).
"""

from __future__ import annotations

import json
import re
from typing import Any

AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
SNAPSHOT = {"true", "last", "false", "first", "first_in_data_collection", "last_in_data_collection", "incremental"}
SOURCE = ("version", "connector", "name", "ts_ms", "snapshot", "db", "table")


class NotDebezium(AssertionError):
    """A message a Debezium consumer would not accept."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise NotDebezium(what)


def schema_names(schema: Any) -> list[str]:
    """Every ``name`` in a Kafka Connect schema tree."""
    if isinstance(schema, dict):
        names = [schema["name"]] if "name" in schema else []
        for value in schema.values():
            names += schema_names(value)
        return names
    if isinstance(schema, list):
        return [n for item in schema for n in schema_names(item)]
    return []


def _unwrap(doc: Any, what: str) -> Any:
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        for name in schema_names(doc["schema"]):
            _check(bool(AVRO_NAME.match(name)), f"{what} schema name {name!r} is not an Avro name")
        return doc["payload"], doc["schema"]
    return doc, None


def check_event(value: bytes) -> dict[str, Any]:
    """The payload of one change event value, checked against the documented format."""
    event, schema = _unwrap(json.loads(value), "value")
    _check(isinstance(event, dict), "the payload is not an object")
    op = event.get("op")
    _check(op in ("c", "r", "u", "d"), f"op {op!r}")
    _check((event.get("before") is None) == (op in ("c", "r")), f"op {op} with before {event.get('before')!r}")
    _check((event.get("after") is None) == (op == "d"), f"op {op} with after {event.get('after')!r}")
    _check(isinstance(event.get("ts_ms"), int), "no ts_ms")
    source = event.get("source")
    _check(isinstance(source, dict) and all(k in source for k in SOURCE), f"source block {source!r}")
    _check(all(isinstance(source[k], str) for k in SOURCE if k != "ts_ms") and isinstance(source["ts_ms"], int),
           f"source block types {source!r}")
    _check(source["snapshot"] in SNAPSHOT, f"snapshot {source['snapshot']!r}")
    _check((op == "r") <= (source["snapshot"] != "false"), "an r event outside a snapshot")
    block = event.get("transaction")
    if block is not None:
        _check(isinstance(block.get("id"), str) and all(isinstance(block.get(k), int) and block[k] > 0
                                                        for k in ("total_order", "data_collection_order")),
               f"transaction block {block!r}")
    if schema is not None:
        fields = {f["field"]: f for f in schema["fields"]}
        _check(set(fields) >= {"before", "after", "source", "op", "ts_ms"}, f"envelope fields {sorted(fields)}")
        _check(schema["name"].endswith(".Envelope"), f"envelope schema name {schema['name']!r}")
        if block is not None:
            _check(fields.get("transaction", {}).get("name") == "event.block", "transaction schema")
    return event


class Table:
    """Rows by key, as an upsert sink keeps them from a Debezium topic (one partition's messages
    in order, or the topic's, since a key lives on one partition)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.ops: list[str] = []
        self.transactions: dict[str, list[int]] = {}
        self._deleted: dict[str, bool] = {}  # key -> its last event was a delete (a tombstone may follow)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        _check(key is not None, "a message without a key")
        payload, _ = _unwrap(json.loads(key), "key")
        _check(isinstance(payload, dict) and payload, f"key {payload!r} is not a struct of key columns")
        k = json.dumps(payload, sort_keys=True)
        if value is None:
            _check(self._deleted.get(k, False), f"a tombstone for {k} that follows no delete")
            self._deleted[k] = False
            self.rows.pop(k, None)
            self.ops.append("tombstone")
            return
        event = check_event(value)
        op = event["op"]
        self.ops.append(op)
        if event.get("transaction") is not None:
            orders = self.transactions.setdefault(event["transaction"]["id"], [])
            orders.append(event["transaction"]["total_order"])
        if op == "d":
            self.rows.pop(k, None)
        else:
            self.rows[k] = event["after"]
        self._deleted[k] = op == "d"
