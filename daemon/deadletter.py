"""Dead letters: input the daemon could not take goes to a topic as it came, with why in headers.

A dead letter follows Kafka Connect's dead-letter-queue convention
(``errors.deadletterqueue.context.headers.enable``), so any Kafka client, kcat or Connect tooling
reads it without ddflow: the record's **value and key are the original message's**, byte for byte,
and where it came from and why are UTF-8 string headers:

=========================================  =====================================================
``__connect.errors.topic``                 the input message's topic (absent: no single message)
``__connect.errors.partition``             its partition
``__connect.errors.offset``                its offset
``__connect.errors.connector.name``        the daemon's group id, when known
``__connect.errors.task.id``               the worker that read it
``__connect.errors.stage``                 ``VALUE_CONVERTER`` (the decoder refused it), ``TASK_PUT``
                                           (only late updates refused), ``TRANSFORMATION`` (a
                                           user function raised)
``__connect.errors.class.name``            the decoder's class, or the user function's name
``__connect.errors.exception.class.name``  the first reason (`formats.types.REASONS`), or the
                                           user function's exception class (``builtins.KeyError``)
``__connect.errors.exception.message``     what was wrong with the first bad update
``__connect.errors.exception.stacktrace``  the user function's traceback (user functions only)
``ddflow.reason``                          each reason, once, in message order (repeated header)
``ddflow.input``                           the input's name (a user function: operator and function)
``ddflow.counts``                          JSON ``{reason: bad updates}`` (1 for a whole message)
``ddflow.indexes``                         JSON ``{reason: [position, ...] | null}`` (null: the
                                           whole message; positions count every update, good or bad)
``ddflow.details``                         JSON ``{reason: what was wrong with its first update}``
``ddflow.value.size``                      the original value's size in bytes
``ddflow.value.format``                    user functions only: ``json`` or ``repr`` (see below)
``ddflow.operator``, ``ddflow.function``,  user functions only: the operator's kind, the function's
``ddflow.where``, ``ddflow.time``          qualified name, its file and line, the record's time
``ddflow.name``, ``ddflow.reading``        user functions only, when given: the operator's name
                                           (``Collection.name``), the named arrangements it reads
=========================================  =====================================================

One dead letter per bad input message however many of its updates are bad: a batch whose updates
are partly malformed or late is dead-lettered whole (its good updates are still processed), the
bad ones' positions in ``ddflow.indexes``. A record a user function raised on under
``on_error = "dead_letter"`` has no single input message (it may come out of a join): its value is
the record as JSON (an array per tuple; ``ddflow.value.format`` ``json``), or its Python ``repr``
in UTF-8 when JSON cannot hold it (bytes, non-finite floats: ``repr``); its key names the function
and the record, the same at every replay. A user function's dead letter is written in the
transaction of the epoch that holds the record's time (`failure_time`; one fed ahead of the epoch
that ran the function waits for its own), so a replay does not write it again either: the sink
tells the writer the outputs' final frontier when it opens (`DeadLetterWriter.functions_final`),
and failures at times below it were dead-lettered by the run that committed those epochs. A
failure whose time the operator does not know is written again by a replay (same key).

Size: the value is cut to ``max_raw_bytes`` only when larger (``ddflow.value.size`` then says the
full size); headers are bounded whatever the message (at most `MAX_LISTED` positions listed,
``ddflow.counts`` still counts every bad update; each detail cut to `MAX_DETAIL` characters), so
a dead letter is at most ``max_raw_bytes`` + `OVERHEAD_BYTES`, within librdkafka's default
``message.max.bytes`` (`MAX_MESSAGE_BYTES`). Dead letters are written through the worker's
producer, inside the epoch's transaction when there is one, so they are committed no later than
the input offsets past their messages. A replay (a restart reads its input again from a
checkpoint or the beginning) does not write them again: the source tells the writer the consumer
group's committed offsets when it opens (`DeadLetterWriter.written_below`), and messages below
them were dead-lettered by the run that committed them. Without transactions (a broker that
refuses them) or when the offsets cannot be read, a replay may write one again: a reader dedupes
by topic, partition and offset (a user function's: by key). `decode_dead_letter` reads one back.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .exceptions import WireError
from .formats.types import Malformed, REASONS
from .observe.rejections import RejectionLog
from .observe.stats import Stats

__all__ = ["DeadLetter", "DeadLetterWriter", "decode_dead_letter", "connect_headers", "MAX_LISTED", "MAX_DETAIL",
           "OVERHEAD_BYTES", "MAX_MESSAGE_BYTES", "STAGES", "failure_time"]

Produce = Callable[[str, bytes | None, bytes, list[tuple[str, bytes]]], None]
Headers = Iterable[tuple[str, bytes | str | None]] | None

MAX_LISTED = 10_000  # positions listed per dead letter, over all reasons
MAX_DETAIL = 256  # characters kept of each detail
MAX_TRACE = 8_192  # characters kept of a user function's traceback
MAX_MESSAGE_BYTES = 1_000_000  # librdkafka's default message.max.bytes: a dead letter fits it
# Connect headers with topic (<= 249 B) and the class names, the input name (<= 249 B), the
# positions as JSON (<= 6 B each), each reason's detail twice at most (<= 6 B a character once
# JSON-escaped), the reasons' names, counts and the user-function headers
OVERHEAD_BYTES = 2_048 + 6 * MAX_LISTED + len(REASONS) * (2 * 6 * MAX_DETAIL + 96) + MAX_TRACE
STAGES = {"decode": "VALUE_CONVERTER", "late": "TASK_PUT", "function": "TRANSFORMATION"}
PREFIX = "__connect.errors."


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter read back (see the module docstring): ``raw`` is the original value (cut
    past ``raw_size`` bytes), ``key`` the original key; ``topic``/``partition``/``offset`` the
    message's position (``""``, -1, -1 for a user function's record); ``input`` the input's name
    (a user function's: ``"{operator} {function}"``); ``worker`` the worker that wrote it."""

    input: str
    topic: str
    partition: int
    offset: int
    counts: dict[str, int]
    indexes: dict[str, list[int] | None]
    details: dict[str, str]
    raw: bytes
    raw_size: int
    key: bytes | None = None
    stage: str = ""
    exception: str = ""
    worker: int | None = None

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
    """Writes dead letters to ``topic`` through ``produce(topic, key, value, headers)``; ``worker``
    (its index) and ``name`` (the daemon's group id) go in every dead letter's headers."""

    def __init__(self, topic: str, produce: Produce, *, stats: Stats | None = None,
                 max_raw_bytes: int | None = None, worker: int | None = None, name: str | None = None):
        self.topic = topic
        self._produce = produce
        self._stats = stats
        self.max_raw_bytes = MAX_MESSAGE_BYTES - OVERHEAD_BYTES if max_raw_bytes is None else max_raw_bytes
        self.worker, self.name = worker, name
        self.written = 0
        self.replayed = 0  # dead letters not written again: their messages were below `written_below`
        self._below: dict[tuple[str, int], int] = {}
        self._final: int | None = None  # user functions' failures below it are written already
        self.said = RejectionLog(topic)  # the log's account of what is written here

    def written_below(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """The messages of each (topic, partition) below ``offsets`` have their dead letters written
        already (those offsets were committed with them): `write` leaves them out from now on."""
        self._below.update(offsets)

    def functions_final(self, frontier: int) -> None:
        """Every epoch below ``frontier`` is committed on the outputs (the sink read them back),
        with the dead letters of the user functions' failures at its times: `write_failure` leaves
        failures at times below it out from now on."""
        self._final = frontier

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
        key: bytes | None = None,
        decoder: str = "",
    ) -> None:
        """One dead letter for the message at ``topic[partition]`` ``offset`` (value ``raw``, key
        ``key``) whose bad updates (or the whole message, ``index`` None) are ``errors``, in message
        order or not; ``decoder``: the class that decoded it (`__connect.errors.class.name`)."""
        if not errors:
            raise WireError(f"writing a dead letter for {topic}[{partition}] offset {offset}: no errors given")
        if offset < self._below.get((topic, partition), -1):
            self.replayed += 1
            return
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
        first = next(iter(counts))
        late_only = set(counts) == {"late"}
        headers = connect_headers(topic, partition, offset, first, details[first])
        headers += self._context("late" if late_only else "decode",
                                 "ddflow.daemon.input.rejects.late_updates" if late_only else decoder)
        headers += [("ddflow.reason", reason.encode()) for reason in counts]
        headers += [("ddflow.input", input.encode()), ("ddflow.counts", _json(counts)),
                    ("ddflow.indexes", _json(indexes)), ("ddflow.details", _json(details)),
                    ("ddflow.value.size", str(len(raw)).encode())]
        self._produce(self.topic, key, raw[: self.max_raw_bytes], headers)
        self.written += 1
        self.said.record(input=input, topic=topic, partition=partition, offset=offset, counts=counts, details=details)
        if self._stats is not None:
            self._stats.input(input).dead_letters.update(counts)

    def write_failure(self, error: Any) -> None:
        """One dead letter for a record a user function raised on (a `UserFunctionError` taken by the
        dataflow's ``dead_letter`` policy): the value is the record as JSON (or its ``repr``), the
        headers the operator, function, file and line, time and exception with its traceback; no
        topic position. The key is the function and the record, the same at every replay. Left out
        (counted in ``replayed``) when its time is below `functions_final`'s frontier."""
        at = failure_time(error)
        if at is not None and self._final is not None and at < self._final:
            self.replayed += 1
            return
        try:
            raw, shape = json.dumps(error.record, allow_nan=False, ensure_ascii=False).encode(), "json"
        except (TypeError, ValueError):
            raw, shape = repr(error.record).encode(), "repr"
        detail = _cut(str(error))
        cause = error.__cause__
        exception = "" if cause is None else f"{type(cause).__module__}.{type(cause).__qualname__}"
        name = f"{error.operator} {error.function}"
        headers = [(PREFIX + "exception.class.name", exception.encode()),
                   (PREFIX + "exception.message", detail.encode())]
        if cause is not None:
            trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
            headers.append((PREFIX + "exception.stacktrace", trace[-MAX_TRACE:].encode()))
        headers += self._context("function", error.function)
        headers += [("ddflow.reason", b"user_function"), ("ddflow.input", name.encode()),
                    ("ddflow.counts", b'{"user_function": 1}'), ("ddflow.indexes", b'{"user_function": null}'),
                    ("ddflow.details", _json({"user_function": detail})),
                    ("ddflow.value.size", str(len(raw)).encode()), ("ddflow.value.format", shape.encode()),
                    ("ddflow.operator", str(error.operator).encode()), ("ddflow.function", str(error.function).encode()),
                    ("ddflow.where", str(error.where).encode())]
        if error.time is not None:
            headers.append(("ddflow.time", str(error.time).encode()))
        if getattr(error, "name", None):
            headers.append(("ddflow.name", str(error.name).encode()))
        headers += [("ddflow.reading", str(label).encode()) for label in getattr(error, "reading", ())]
        key = f"{error.function} {error.where}: {repr(error.record)[:512]}".encode()
        self._produce(self.topic, key, raw[: self.max_raw_bytes], headers)
        self.written += 1
        given = "" if getattr(error, "name", None) is None else f" {error.name!r}"
        self.said.record(input=error.operator, topic="", partition=-1, offset=-1, counts={"user_function": 1},
                         details={"user_function": detail}, where=f"{name}{given} ({error.where})")

    def _context(self, stage: str, executing: str) -> list[tuple[str, bytes]]:
        """Connect's headers naming who failed: connector (the daemon), task (the worker), stage, class."""
        headers = [] if self.name is None else [(PREFIX + "connector.name", self.name.encode())]
        if self.worker is not None:
            headers.append((PREFIX + "task.id", str(self.worker).encode()))
        headers.append((PREFIX + "stage", STAGES[stage].encode()))
        if executing:
            headers.append((PREFIX + "class.name", executing.encode()))
        return headers

    @property
    def max_bytes(self) -> int:
        """The largest dead letter this writer produces (value, key and headers)."""
        return self.max_raw_bytes + OVERHEAD_BYTES


def failure_time(error: Any) -> int | None:
    """The time of the epoch a user function's failure belongs to: its record's time (the outer
    time inside a loop), None when the operator did not name it."""
    t = getattr(error, "time", None)
    if isinstance(t, tuple):
        t = t[0] if t else None
    return t if isinstance(t, int) else None


def connect_headers(topic: str, partition: int, offset: int, reason: str, detail: str) -> list[tuple[str, bytes]]:
    """Where a dead letter came from and why, in Kafka Connect's dead-letter headers:
    ``__connect.errors.topic``, ``.partition``, ``.offset``, ``.exception.class.name`` (the reason)
    and ``.exception.message`` (its detail), UTF-8 strings as Connect writes them."""
    return [(PREFIX + "topic", topic.encode()), (PREFIX + "partition", str(partition).encode()),
            (PREFIX + "offset", str(offset).encode()),
            (PREFIX + "exception.class.name", reason.encode()),
            (PREFIX + "exception.message", detail.encode())]


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one encoder: json.dumps builds one per call


def _json(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode()


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def decode_dead_letter(value: bytes | None, headers: Headers, key: bytes | None = None) -> DeadLetter:
    """Read a dead letter back from its value, headers (as a Kafka client gives them: ``(name,
    bytes)`` pairs) and key. One written by Kafka Connect itself (no ``ddflow.*`` headers) reads as
    one bad message whose reason is its exception class, its input the connector; a `WireError`
    when the headers are neither's."""
    found: dict[str, str] = {}
    try:
        for name, data in headers or ():
            if name not in found and data is not None:
                found[name] = data if isinstance(data, str) else data.decode()
        if "ddflow.counts" not in found:  # another writer's (Kafka Connect's): its one exception
            error = found[PREFIX + "exception.class.name"]
            found |= {"ddflow.counts": json.dumps({error: 1}), "ddflow.indexes": json.dumps({error: None}),
                      "ddflow.details": json.dumps({error: found.get(PREFIX + "exception.message", "")}),
                      "ddflow.input": found.get(PREFIX + "connector.name", "")}
        counts = json.loads(found["ddflow.counts"])
        indexes = json.loads(found["ddflow.indexes"])
        raw = value or b""
        return DeadLetter(
            input=found["ddflow.input"],
            topic=found.get(PREFIX + "topic", ""),
            partition=int(found.get(PREFIX + "partition", -1)),
            offset=int(found.get(PREFIX + "offset", -1)),
            counts={str(r): int(n) for r, n in counts.items()},
            indexes={str(r): (None if v is None else [int(i) for i in v]) for r, v in indexes.items()},
            details={str(r): str(d) for r, d in json.loads(found["ddflow.details"]).items()},
            raw=raw,
            raw_size=int(found.get("ddflow.value.size", len(raw))),
            key=key,
            stage=found.get(PREFIX + "stage", ""),
            exception=found.get(PREFIX + "exception.class.name", ""),
            worker=int(found[PREFIX + "task.id"]) if PREFIX + "task.id" in found else None,
        )
    except Exception as exc:
        names = sorted(found) or "none"
        raise WireError(f"decoding a dead letter: its headers ({names}) are not a ddflow dead letter's ({exc!r})") from exc
