"""The epochs of the JSON-based outputs (json, debezium): the header of their data messages, the
markers on their companion progress topic, and their messages read back.

Every data message carries the header ``ddflow-epoch`` =
``{"lower": l, "upper": u, "incarnation": id}``; the progress topic holds the markers
``{"topic": data topic, "partition": p, "lower": l, "upper": u, "incarnation": id, "count": n}``
(``n`` data messages of that incarnation and range on ``p``; with ``W > 1`` writers also
``"writer": i, "writers": W``, see `result_protocol`), keyed ``"topic:p"``. Kafka
Connect sinks ignore the header; `ddflow.daemon.kafka.results.ResultClient` pairs the two.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import WireError
from .result_protocol import check_writer
from .rows import dumps
from .types import Message

__all__ = ["EPOCH_HEADER", "Marker", "epoch_header", "marker_message", "output_json", "read_epoch_header",
           "read_marker", "restamp"]

EPOCH_HEADER = "ddflow-epoch"


@dataclass(frozen=True)
class Marker:
    """A progress marker on a companion progress topic: ``count`` data messages of
    ``incarnation`` for ``[lower, upper)`` are on ``topic[partition]``."""

    topic: str
    partition: int
    lower: int
    upper: int | None
    incarnation: str
    count: int
    writer: int = 0
    writers: int = 1


def output_json(value: bytes | None, what: str) -> Any:
    """A json or debezium output message's JSON with Kafka Connect's ``{"schema", "payload"}`` wrapper
    taken off; WireError naming ``what`` (e.g. "a json output message") when it is not JSON."""
    try:
        obj = json.loads(value or b"")
    except ValueError as exc:
        raise WireError(f"{what} {value!r:.80} is not JSON ({exc})") from None
    if type(obj) is dict and set(obj) == {"schema", "payload"}:
        return obj["payload"]
    return obj


def epoch_header(lower: int, upper: int | None, incarnation: str) -> list[tuple[str, bytes]]:
    return [(EPOCH_HEADER, dumps({"lower": lower, "upper": upper, "incarnation": incarnation}))]


def _time(value: Any, name: str, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if type(value) is not int or not T_MIN <= value <= T_MAX:
        raise WireError(f"{name} {value!r:.40} is not an int64 time")
    return value


def read_epoch_header(headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[str, int, int | None]:
    """(incarnation, lower, upper) of a data message; WireError without a valid header."""
    for name, raw in headers or ():
        if name == EPOCH_HEADER:
            try:
                obj = json.loads(raw or b"")
                inc = obj["incarnation"]
                if type(inc) is not str:
                    raise TypeError("incarnation")
                return inc, _time(obj["lower"], "lower"), _time(obj["upper"], "upper", nullable=True)  # type: ignore[return-value]
            except (ValueError, KeyError, TypeError, WireError) as exc:
                raise WireError(f"header {EPOCH_HEADER} {raw!r:.120} is malformed ({exc})") from None
    raise WireError(f"a data message without the {EPOCH_HEADER} header (not written by a ddflow daemon)")


def marker_message(progress_topic: str, marker: Marker) -> Message:
    """The progress-topic message of ``marker`` (partitioned by its key ``"topic:partition"``)."""
    obj = {"topic": marker.topic, "partition": marker.partition, "lower": marker.lower, "upper": marker.upper,
           "incarnation": marker.incarnation, "count": marker.count}
    if marker.writers > 1:
        obj["writer"], obj["writers"] = marker.writer, marker.writers
    value = dumps(obj)
    return progress_topic, None, f"{marker.topic}:{marker.partition}".encode(), value, None


def read_marker(value: bytes | None) -> Marker:
    """A progress-topic message back; WireError on anything else."""
    try:
        obj = json.loads(value or b"")
        topic, partition, inc, count = obj["topic"], obj["partition"], obj["incarnation"], obj["count"]
        if type(topic) is not str or type(partition) is not int or type(inc) is not str or type(count) is not int:
            raise TypeError("topic/partition/incarnation/count")
        return Marker(topic, partition, _time(obj["lower"], "lower"), _time(obj["upper"], "upper", True), inc,  # type: ignore[arg-type]
                      count, *check_writer(obj.get("writer", 0), obj.get("writers", 1)))
    except (ValueError, KeyError, TypeError, WireError) as exc:
        raise WireError(f"a progress-topic message {value!r:.120} is not a ddflow progress marker ({exc})") from None


def restamp(message: Message, progress_topic: str, incarnation: str) -> Message:
    """A data message or marker of a json/debezium output naming ``incarnation`` instead."""
    topic, partition, key, value, headers = message
    if topic == progress_topic and headers is None:
        m = read_marker(value)
        return marker_message(progress_topic, Marker(m.topic, m.partition, m.lower, m.upper, incarnation, m.count,
                                                     m.writer, m.writers))
    _, lower, upper = read_epoch_header(headers)  # type: ignore[arg-type]
    return topic, partition, key, value, epoch_header(lower, upper, incarnation)
