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

What a worker reads from these topics is checked before it is filed (`decode_message`): a value
that is not msgpack, not a map, of an unknown kind, or a message of this run missing a field or
holding one of the wrong type or size (a marker without ``seq``, a batch whose columns disagree
with its count) raises `ExchangeMessageError` saying what is wrong; the transport skips it and
`Refusals` says so in the log, naming the topic, partition, offset and the receiving worker. A
garbage message on an exchange topic is never filed and never stops a worker: it stays on the
topic, and a worker that stopped on it would stop on it again at every restart. Maps of other runs
are skipped silently, as before (an earlier deployment's messages in the same topics).

A receiver files what it reads of one step in a `Box`: ``(parts, markers)``, ``parts[source][inc]
[part]`` the batch messages of each sender incarnation (``inc``, one per process) with ``"n"``, their
count of updates, and ``markers[source]`` the first marker of each sender. A caller may assume the
functions here are pure: they neither read nor write topics, and `step_batches` returns the updates
of a complete box in the order and shape `batch_messages` took them from (records as int64 columns
when they were sent so, else as records rebuilt by `ddflow.daemon.formats.types.to_record`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import numpy as np

from ...operators.transport import ExchangeBatch, ExchangeMarker
from ..exceptions import DaemonError
from ..formats.types import to_record

__all__ = ["Box", "ExchangeMessageError", "Refusals", "batch_messages", "decode_message", "int64_bytes",
           "marker_message", "step_batches", "step_complete"]

log = logging.getLogger("ddflow.daemon.cluster.transport")


class ExchangeMessageError(DaemonError):
    """A message read from an exchange or agree topic that no worker of this run wrote as it stands."""


KINDS = ("batch", "marker", "vote", "hello", "generation")


def decode_message(value: bytes | None, *, run: str, workers: int) -> dict | None:
    """The message ``value`` as the map a worker of ``run`` wrote, its fields checked for ``workers``
    workers; None when it is a map of another run (skipped); `ExchangeMessageError` saying what is
    wrong with anything else."""
    if value is None:
        raise ExchangeMessageError("it has no value")
    try:
        m = msgpack.unpackb(value, raw=False, use_list=True, strict_map_key=False)
    except Exception as exc:  # msgpack raises several kinds (FormatError, ExtraData, ValueError, ...)
        raise ExchangeMessageError(f"it is not msgpack ({type(exc).__name__}: {exc or 'malformed'})") from None
    if not isinstance(m, dict):
        raise ExchangeMessageError(f"it is a msgpack {type(m).__name__}, not a map")
    if m.get("run") != run:
        return None
    kind = m.get("kind")
    if kind not in KINDS:
        raise ExchangeMessageError(f"it is of unknown kind {kind!r}")
    problem = _CHECKS[kind](m, workers)
    if problem is not None:
        raise ExchangeMessageError(f"a {kind} message {problem}")
    return m


def _int(m: dict, key: str, lo: int | None = None, hi: int | None = None, *, none: bool = False) -> str | None:
    """What is wrong with ``m[key]`` as an int in ``[lo, hi)`` (or None when ``none``), else None."""
    if key not in m:
        return f"has no {key!r}"
    v = m[key]
    if v is None and none:
        return None
    if type(v) is not int:
        return f"has {key!r} = {v!r:.60}, not an int"
    if (lo is not None and v < lo) or (hi is not None and v >= hi):
        return f"has {key!r} = {v} outside [{lo}, {'...' if hi is None else hi})"
    return None


def _first(*problems: str | None) -> str | None:
    return next((p for p in problems if p is not None), None)


def _step_head(m: dict, workers: int) -> str | None:
    rounds = m.get("rounds")
    return _first(
        None if isinstance(m.get("inc"), str) else "has no sender incarnation 'inc' (a str)",
        _int(m, "channel", 0), _int(m, "seq", 0), _int(m, "source", 0, workers), _int(m, "dest", 0, workers),
        _int(m, "lower", none=True), _int(m, "upper", none=True),
        None if isinstance(rounds, list) and all(type(r) is int for r in rounds) else
        f"has 'rounds' = {rounds!r:.60}, not a list of ints")


def _batch(m: dict, workers: int) -> str | None:
    problem = _first(_step_head(m, workers), _int(m, "part", 0), _int(m, "depth", 1), _int(m, "width", 1, 3))
    if problem is not None:
        return problem
    times, diffs, records, columns = m.get("times"), m.get("diffs"), m.get("records"), m.get("columns")
    if not isinstance(diffs, bytes) or len(diffs) % 8:
        return "has 'diffs' that are not int64 bytes"
    n = len(diffs) // 8
    if not isinstance(times, bytes) or len(times) != n * m["depth"] * 8:
        return f"has 'times' that are not {n} x {m['depth']} int64 bytes"
    if records is None:
        if not isinstance(columns, bytes) or len(columns) != n * m["width"] * 8:
            return f"has neither 'records' nor 'columns' of {n} x {m['width']} int64 bytes"
    elif not isinstance(records, list) or len(records) != n or columns is not None:
        return f"has 'records' that are not a list of {n} (with no 'columns')"
    return None


def _marker(m: dict, workers: int) -> str | None:
    return _first(_step_head(m, workers), _int(m, "count", 0))


def _vote(m: dict, workers: int) -> str | None:
    return _first(_int(m, "seq", 0), _int(m, "source", 0, workers), None if "value" in m else "has no 'value'")


def _generation(m: dict, workers: int) -> str | None:
    generation = m.get("generation")
    return _first(None if generation is None or isinstance(generation, str) else
                  f"has 'generation' = {generation!r:.60}, not a str", _int(m, "start", 0, none=True)
                  if "start" in m else None)


_CHECKS: dict[str, Callable[[dict, int], str | None]] = {
    "batch": _batch, "marker": _marker, "vote": _vote, "hello": lambda m, w: None, "generation": _generation}


class Refusals:
    """Messages refused by worker ``worker``, said in the log: the first refused on each partition at
    once (WARNING: topic, partition, offset, the worker and why), later ones counted and said at most
    once per ``window`` seconds per partition. ``count``: every message refused so far."""

    def __init__(self, worker: int, *, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.worker, self.window, self._clock = worker, window, clock
        self.count = 0
        self._said: dict[tuple[str, int], list[float]] = {}  # partition -> [when said, refused since]

    def refuse(self, topic: str, partition: int, offset: int, error: ExchangeMessageError) -> None:
        self.count += 1
        now = self._clock()
        said = self._said.get((topic, partition))
        if said is not None and now - said[0] < self.window:
            said[1] += 1
            return
        since = "" if said is None or not said[1] else f" ({said[1]} more refused there since the last said)"
        self._said[(topic, partition)] = [now, 0]
        log.warning("exchange: worker %d refused the message at %s[%d] offset %d: %s; skipped (not written by a "
                    "worker of this run as it stands: something else writes to the exchange topics)%s",
                    self.worker, topic, partition, offset, error, since)

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
