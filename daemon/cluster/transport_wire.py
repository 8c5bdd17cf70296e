"""The exchange topics' messages: an exchange step's updates as msgpack maps, and back.

`KafkaTransport` (`transport`) writes these maps to the exchange topics; it adds to each the
``run`` and ``gen``\\ eration it belongs to before encoding it with msgpack:

    batch   {"run", "gen", "inc", "kind": "batch", "channel", "seq", "source", "dest", "lower", "upper",
             "rounds", "part", "records": [data, ...] or None, "columns": int64 bytes or None, "width",
             "times": int64 bytes, "depth", "diffs": int64 bytes}    (at most ``max_batch`` updates;
             records of ints or pairs of ints travel as one or two little-endian int64 columns)
    marker  {"run", "gen", "inc", "kind": "marker", "channel", "seq", "source", "dest", "lower", "upper",
             "rounds", "count"}                                      (the updates sent in the step)
    vote    {"run", "gen", "kind": "vote", "seq", "source", "value"}

A receiver files what it reads of one step in a `Box`: ``(parts, markers)``, ``parts[source][inc]
[part]`` the batch messages of each sender incarnation (``inc``, one per process) with ``"n"``, their
count of updates, and ``markers[source]`` the first marker of each sender. A caller may assume the
functions here are pure: they neither read nor write topics, and `step_batches` returns the updates
of a complete box in the order and shape `batch_messages` took them from (records as int64 columns
when they were sent so, else as records rebuilt by `ddflow.daemon.formats.types.to_record`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...operators.transport import ExchangeBatch, ExchangeMarker
from ..formats.types import to_record

__all__ = ["Box", "batch_messages", "int64_bytes", "marker_message", "step_batches", "step_complete"]

# one exchange step as received: (source -> incarnation -> part -> batch message, source -> marker)
Box = tuple[dict[int, dict[str, dict[int, dict]]], dict[int, dict]]


def int64_bytes(column: np.ndarray) -> bytes:
    """An int64 array as little-endian bytes (row-major)."""
    return np.ascontiguousarray(column, dtype="<i8").tobytes()


def batch_messages(batch: ExchangeBatch, *, incarnation: str, max_batch: int) -> Iterator[dict]:
    """The batch messages carrying ``batch``, at most ``max_batch`` updates each (none for an empty one)."""
    head = {"kind": "batch", "inc": incarnation, "channel": batch.channel, "seq": batch.seq,
            "source": batch.source, "dest": batch.dest, "lower": batch.lower, "upper": batch.upper,
            "rounds": list(batch.rounds)}
    columnar = isinstance(batch.records, np.ndarray)
    depth = batch.times.shape[1]
    for start in range(0, len(batch.diffs), max_batch):
        end = start + max_batch
        records = batch.records[start:end]
        yield {
            **head, "part": start, "depth": depth, "width": records.shape[1] if columnar and records.ndim == 2 else 1,
            "records": None if columnar else list(records),
            "columns": int64_bytes(records) if columnar else None,
            "times": int64_bytes(batch.times[start:end]), "diffs": int64_bytes(batch.diffs[start:end])}


def marker_message(marker: ExchangeMarker, *, incarnation: str) -> dict:
    """The marker message closing ``marker.source``'s part of an exchange step to ``marker.dest``."""
    return {"kind": "marker", "inc": incarnation, "channel": marker.channel, "seq": marker.seq,
            "source": marker.source, "dest": marker.dest, "lower": marker.lower, "upper": marker.upper,
            "rounds": list(marker.rounds), "count": marker.count}


def step_complete(box: Box, workers: int) -> bool:
    """Whether ``box`` holds all of a step: a marker from each of the other ``workers - 1`` workers
    and as many updates of that marker's sender incarnation as it counts."""
    parts, markers = box
    return len(markers) >= workers - 1 and all(
        sum(m["n"] for m in parts.get(s, {}).get(mk["inc"], {}).values()) == mk["count"]
        for s, mk in markers.items())


def step_batches(box: Box, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
    """The batches of a complete ``box`` (step ``seq`` of exchange point ``channel`` to ``worker``),
    one per sender that sent updates, by sender."""
    out = []
    for source, marker in sorted(box[1].items()):
        parts = box[0].get(source, {}).get(marker["inc"], {})
        if not parts:
            continue
        msgs = [parts[k] for k in sorted(parts)]
        head = msgs[0]
        if head["records"] is None:
            cols = [np.frombuffer(m["columns"], dtype="<i8") for m in msgs]
            records: list[Any] | np.ndarray = np.concatenate(cols).astype(np.int64)
            if head["width"] == 2:
                records = records.reshape(-1, 2)
        else:
            records = [to_record(r) for m in msgs for r in m["records"]]
        times = np.concatenate([np.frombuffer(m["times"], dtype="<i8") for m in msgs]).astype(np.int64)
        diffs = np.concatenate([np.frombuffer(m["diffs"], dtype="<i8") for m in msgs]).astype(np.int64)
        out.append(ExchangeBatch(channel, seq, source, worker, head["lower"], head["upper"], tuple(head["rounds"]),
                                 records, times.reshape(len(diffs), head["depth"]), diffs))
    return out
