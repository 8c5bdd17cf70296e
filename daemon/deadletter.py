"""Dead letters: malformed or rejected input goes to a topic, with where it came from and why.

A dead letter is a msgpack map on the dead-letter topic::

    {"input": name, "topic": t, "partition": p, "offset": o, "index": i | nil,
     "reason": r, "detail": text, "raw": bytes, "raw_size": n}

``index`` is the position of the bad update inside a batch message (nil when the whole message
is bad); ``raw`` is the message value (cut to ``max_raw_bytes``, ``raw_size`` is its full size);
``reason`` is one of `wire.REASONS`. The key is ``"topic:partition:offset"`` and the reason is
also a header (``ddflow-reason``), so tools can filter without decoding. Dead letters are written
through the worker's producer, inside the epoch's transaction when there is one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from .exceptions import WireError
from .stats import Stats
from .wire import REASONS

__all__ = ["DeadLetter", "DeadLetterWriter", "decode_dead_letter"]

Produce = Callable[[str, bytes, bytes, list[tuple[str, bytes]]], None]


@dataclass(frozen=True)
class DeadLetter:
    input: str
    topic: str
    partition: int
    offset: int
    index: int | None
    reason: str
    detail: str
    raw: bytes
    raw_size: int


class DeadLetterWriter:
    """Writes dead letters to ``topic`` through ``produce(topic, key, value, headers)``."""

    def __init__(self, topic: str, produce: Produce, *, stats: Stats | None = None, max_raw_bytes: int = 1 << 16):
        self.topic = topic
        self._produce = produce
        self._stats = stats
        self.max_raw_bytes = max_raw_bytes
        self.written = 0

    def write(
        self,
        *,
        input: str,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        detail: str,
        raw: bytes | None,
        index: int | None = None,
    ) -> None:
        if reason not in REASONS:
            raise WireError(f"writing a dead letter: unknown reason {reason!r}; expected one of {sorted(REASONS)}")
        raw = raw or b""
        value = msgpack.packb(
            {
                "input": input,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "index": index,
                "reason": reason,
                "detail": detail,
                "raw": raw[: self.max_raw_bytes],
                "raw_size": len(raw),
            },
            use_bin_type=True,
        )
        self._produce(self.topic, f"{topic}:{partition}:{offset}".encode(), value, [("ddflow-reason", reason.encode())])
        self.written += 1
        if self._stats is not None:
            self._stats.input(input).dead_letters[reason] += 1


def decode_dead_letter(value: bytes) -> DeadLetter:
    """Read a dead-letter message value back."""
    try:
        obj: dict[str, Any] = msgpack.unpackb(value, raw=False)
        return DeadLetter(
            input=obj["input"],
            topic=obj["topic"],
            partition=obj["partition"],
            offset=obj["offset"],
            index=obj["index"],
            reason=obj["reason"],
            detail=obj["detail"],
            raw=obj["raw"],
            raw_size=obj["raw_size"],
        )
    except Exception as exc:
        raise WireError(f"decoding a dead letter: {value[:80]!r} is not a dead-letter record ({exc})") from exc
