"""Dead letters: malformed or rejected input goes to a topic, with where it came from and why.

One dead letter per bad input message, however many of its updates are bad: a msgpack map on
the dead-letter topic::

    {"input": name, "topic": t, "partition": p, "offset": o,
     "counts": {reason: n, ...},            # bad updates per reason (1 for a whole bad message)
     "indexes": {reason: [i, ...] | nil},   # their positions in the batch (nil: the whole message)
     "details": {reason: text},             # what was wrong with the first of each reason
     "raw": bytes, "raw_size": n}

``reason`` is one of `formats.types.REASONS`; the positions count every update of the message, good or
bad. ``raw`` is the message value, stored once (cut to ``max_raw_bytes``; ``raw_size`` is its
full size). A dead letter's size is bounded whatever the message: at most `MAX_LISTED` positions
are listed in all (``counts`` still counts every bad update) and each detail is cut to
`MAX_DETAIL` characters, so a dead letter is at most ``max_raw_bytes`` + `OVERHEAD_BYTES` (topic
names up to Kafka's 249 characters included). The key is ``"topic:partition:offset"`` and each
reason is also a header (``ddflow-reason``), so tools can filter without decoding; the source
position and the first reason with its detail are also in Kafka Connect's dead-letter headers
(`connect_headers`: ``__connect.errors.topic``, ``.partition``, ``.offset``,
``.exception.class.name``, ``.exception.message``). Dead letters
are written through the worker's producer, inside the epoch's transaction when there is one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from .exceptions import WireError
from .formats.types import Malformed, REASONS
from .observe.rejections import RejectionLog
from .observe.stats import Stats

__all__ = ["DeadLetter", "DeadLetterWriter", "decode_dead_letter", "connect_headers", "MAX_LISTED", "MAX_DETAIL",
           "OVERHEAD_BYTES"]

Produce = Callable[[str, bytes, bytes, list[tuple[str, bytes]]], None]

MAX_LISTED = 10_000  # positions listed per dead letter, over all reasons
MAX_DETAIL = 256  # characters kept of each detail
# envelope (~100 B) + input name and topic (<= 2 x 249 B) + positions (<= 5 B each) + one
# detail per reason (<= 4 x 256 B of UTF-8 each, 13 reasons) + the reasons' names
OVERHEAD_BYTES = 1_024 + 5 * MAX_LISTED + len(REASONS) * (4 * MAX_DETAIL + 64)


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered input message and what was wrong with it (see the module docstring)."""

    input: str
    topic: str
    partition: int
    offset: int
    counts: dict[str, int]
    indexes: dict[str, list[int] | None]
    details: dict[str, str]
    raw: bytes
    raw_size: int

    @property
    def reasons(self) -> list[str]:
        """The reasons, in the order their first bad update appears in the message."""
        return list(self.counts)

    @property
    def reason(self) -> str:
        """The first reason (the only one when the whole message is bad)."""
        return next(iter(self.counts))

    @property
    def index(self) -> int | None:
        """The position of the first bad update of the first reason (None: the whole message)."""
        listed = self.indexes.get(self.reason)
        return listed[0] if listed else None

    @property
    def detail(self) -> str:
        return self.details.get(self.reason, "")

    @property
    def complete(self) -> bool:
        """Whether every bad update's position is listed (False past `MAX_LISTED`)."""
        return all(v is None or len(v) == self.counts[r] for r, v in self.indexes.items())

    def bad(self) -> list[tuple[int | None, str]]:
        """(position, reason) of every listed bad update, in message order."""
        pairs = [(i, r) for r, listed in self.indexes.items() for i in (listed if listed is not None else [None])]
        return sorted(pairs, key=lambda p: -1 if p[0] is None else p[0])


class DeadLetterWriter:
    """Writes dead letters to ``topic`` through ``produce(topic, key, value, headers)``."""

    def __init__(self, topic: str, produce: Produce, *, stats: Stats | None = None, max_raw_bytes: int = 1 << 16):
        self.topic = topic
        self._produce = produce
        self._stats = stats
        self.max_raw_bytes = max_raw_bytes
        self.written = 0
        self.said = RejectionLog(topic)  # the log's account of what is written here

    def tick(self) -> None:
        """Log the dead-letter counts due (at most a line per reason a minute; see `RejectionLog`)."""
        self.said.tick()

    def write(
        self,
        *,
        input: str,
        topic: str,
        partition: int,
        offset: int,
        raw: bytes | None,
        errors: Sequence[Malformed],
    ) -> None:
        """One dead letter for the message at ``topic[partition]`` ``offset`` whose bad updates
        (or the whole message, ``index`` None) are ``errors``, in message order or not."""
        if not errors:
            raise WireError(f"writing a dead letter for {topic}[{partition}] offset {offset}: no errors given")
        counts: dict[str, int] = {}
        indexes: dict[str, list[int] | None] = {}
        details: dict[str, str] = {}
        listed = 0
        for bad in sorted(errors, key=lambda b: -1 if b.index is None else b.index):
            reason = bad.reason
            if reason not in REASONS:
                raise WireError(f"writing a dead letter: unknown reason {reason!r}; expected one of {sorted(REASONS)}")
            counts[reason] = counts.get(reason, 0) + 1
            if reason not in details:
                details[reason] = _cut(bad.detail)
            if bad.index is None:
                indexes.setdefault(reason, None)
            else:
                positions = indexes.get(reason)
                if positions is None:
                    positions = indexes[reason] = []
                if listed < MAX_LISTED:
                    positions.append(bad.index)
                    listed += 1
        raw = raw or b""
        value = msgpack.packb(
            {
                "input": input,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "counts": counts,
                "indexes": indexes,
                "details": details,
                "raw": raw[: self.max_raw_bytes],
                "raw_size": len(raw),
            },
            use_bin_type=True,
        )
        headers = [("ddflow-reason", reason.encode()) for reason in counts]
        first = next(iter(counts))
        headers += connect_headers(topic, partition, offset, first, details[first])
        self._produce(self.topic, f"{topic}:{partition}:{offset}".encode(), value, headers)
        self.written += 1
        self.said.record(input=input, topic=topic, partition=partition, offset=offset, counts=counts, details=details)
        if self._stats is not None:
            self._stats.input(input).dead_letters.update(counts)

    def write_failure(self, error: Any) -> None:
        """One dead letter for a record a user function raised on (a `UserFunctionError` taken by the
        dataflow's ``dead_letter`` policy): ``input`` names the operator and function, ``raw`` is the
        record's ``repr``, the detail the error (function, file, line, exception, record, time); no
        topic position (``""``, -1, -1). The key is the function and the record, the same at every
        replay, so a reader deduplicates by it."""
        raw = repr(error.record).encode()
        detail = _cut(str(error))
        value = msgpack.packb(
            {"input": f"{error.operator} {error.function}", "topic": "", "partition": -1, "offset": -1,
             "counts": {"user_function": 1}, "indexes": {"user_function": None},
             "details": {"user_function": detail}, "raw": raw[: self.max_raw_bytes], "raw_size": len(raw)},
            use_bin_type=True,
        )
        key = f"{error.function} {error.where}: {raw[:512].decode(errors='replace')}".encode()
        self._produce(self.topic, key, value, [("ddflow-reason", b"user_function"),
                                               *connect_headers("", -1, -1, "user_function", detail)])
        self.written += 1
        self.said.record(input=error.operator, topic="", partition=-1, offset=-1, counts={"user_function": 1},
                         details={"user_function": detail}, where=f"{error.operator} {error.function} ({error.where})")

    @property
    def max_bytes(self) -> int:
        """The largest dead letter this writer produces."""
        return self.max_raw_bytes + OVERHEAD_BYTES


def connect_headers(topic: str, partition: int, offset: int, reason: str, detail: str) -> list[tuple[str, bytes]]:
    """Where a dead letter came from and why, in the headers Kafka Connect's dead-letter queues use
    (``errors.deadletterqueue.context.headers.enable``), so any client or Connect tooling reads them
    without decoding the value: ``__connect.errors.topic``, ``.partition``, ``.offset``,
    ``.exception.class.name`` (the reason) and ``.exception.message`` (its detail), UTF-8 strings."""
    return [("__connect.errors.topic", topic.encode()), ("__connect.errors.partition", str(partition).encode()),
            ("__connect.errors.offset", str(offset).encode()),
            ("__connect.errors.exception.class.name", reason.encode()),
            ("__connect.errors.exception.message", detail.encode())]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def decode_dead_letter(value: bytes) -> DeadLetter:
    """Read a dead-letter message value back."""
    try:
        obj: dict[str, Any] = msgpack.unpackb(value, raw=False)
        indexes: Mapping[str, Any] = obj["indexes"]
        return DeadLetter(
            input=obj["input"],
            topic=obj["topic"],
            partition=obj["partition"],
            offset=obj["offset"],
            counts=dict(obj["counts"]),
            indexes={r: (None if v is None else list(v)) for r, v in indexes.items()},
            details=dict(obj["details"]),
            raw=obj["raw"],
            raw_size=obj["raw_size"],
        )
    except Exception as exc:
        raise WireError(f"decoding a dead letter: {value[:80]!r} is not a dead-letter record ({exc})") from exc
