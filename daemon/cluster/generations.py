"""Generations of an exchange run: which exchange history the workers share, decided by worker 0.

A run's exchange history is valid only for the state it was built from. Worker 0 decides the
generation (`join`): it continues the one its checkpoint names, else starts a new one (its state is
gone, so every worker's is void); it announces it in the agree topic
``{"run", "kind": "generation", "generation", "start", "origin"}`` (``start``: the agree-topic offset
where the generation began; ``origin``: the snapshot it started from, so that a worker replaying it
from its start can tell whether it would start from the same) at its start and in answer to every
``{"run", "kind": "hello", "source"}`` a joining worker writes. A joining worker takes the first
announcement after its hello: it resumes from its checkpoint if that names the generation, else it
joins fresh, reading the agree topic from the generation's start and the exchange topics from their
beginning. A worker that sees worker 0 announce another generation than its own raises
`GenerationChanged` (its state belongs to a run that no longer exists; restarted, it joins the new one).

`Generations` is the part of `ddflow.daemon.cluster.transport.KafkaTransport` that does this: it
reads and writes only the agree topic, through the transport's producer, consumer and poll loop
(the attributes declared below, which the transport sets). A caller may assume that after `join`
returns, ``generation``, ``start`` and ``origin`` are the same on every worker, and that every
message the transport sends from then on is tagged with that generation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from ..exceptions import DaemonError, KafkaClientError

__all__ = ["GenerationChanged", "Generations", "UNKNOWN"]

# a generation's origin that was not recorded (announced by a worker 0 that did not record one)
UNKNOWN = "?"


class GenerationChanged(DaemonError):
    """Worker 0 started another generation: this worker's state belongs to one that is void."""


class Generations:
    """Joining a generation and answering for it (see the module); mixed into `KafkaTransport`."""

    index: int
    run: str
    timeout: float
    producer: Any
    generation: str | None
    start: int
    origin: Any
    waiting_on: tuple[int, ...]
    waiting_since: float | None
    _agree: str
    _delivered: dict[str, int]
    _announced: tuple[str, int, Any] | None
    _starts: dict[int, int]
    _joined: bool
    _assign_agree: Callable[[int], None]
    _poll: Callable[[float, str, tuple[int, ...]], None]

    def join(self, generation: str | None = None, *, start: int | None = None, agree_offset: int | None = None,
             exchange_offsets: Mapping[int, int] | None = None, origin: Any = UNKNOWN) -> bool:
        """Enter a generation (see the module). ``generation`` and ``start``: the generation this
        worker was in (its checkpoint's, or, for worker 0, the one it last announced); with
        ``agree_offset`` and ``exchange_offsets`` its checkpoint's positions (see `positions`).
        ``origin`` (worker 0): what the generation starts from (a snapshot's identity or None; for
        a known generation, what it started from, `UNKNOWN` if not recorded), announced with it and
        then in `origin` on every worker. Returns whether the worker resumes from its checkpoint
        (False: it starts empty and replays the generation from its start)."""
        if self.index == 0:
            known = generation is not None and start is not None
            self.generation = generation if known else uuid.uuid4().hex[:16]
            self.origin = origin
            offset = self._write(self._announcement(start if known else None))
            self.start = start if known and start is not None else offset
            self._announced = (self.generation, self.start, self.origin)
            resume = known and agree_offset is not None
        else:
            hello = self._write({"kind": "hello", "source": self.index})
            self._assign_agree(hello + 1)
            deadline = time.monotonic() + self.timeout
            self.waiting_since = time.monotonic()
            while self._announced is None:  # worker 0 answers every hello with its generation
                self.waiting_on = (0,)
                try:
                    self._poll(deadline, "joining the workers' generation", (0,))
                finally:
                    self.waiting_on = ()
            self.waiting_since = None
            self.generation, self.start, self.origin = self._announced
            resume = generation == self.generation and agree_offset is not None
        if resume:
            self._starts = dict(exchange_offsets or {})
        self._assign_agree(agree_offset if resume and agree_offset is not None else self.start)
        self._joined = True
        return resume

    def _announcement(self, start: int | None) -> dict:
        message = {"kind": "generation", "generation": self.generation, "start": start}
        if self.origin is not UNKNOWN:
            message["origin"] = self.origin
        return message

    def _write(self, message: dict) -> int:
        """Produce a generation message to the agree topic and wait for its offset."""
        message["run"] = self.run
        key = uuid.uuid4().hex

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self._delivered[key] = msg.offset()

        self.producer.produce(self._agree, msgpack.packb(message, use_bin_type=True), partition=0, on_delivery=delivered)
        self.producer.flush(self.timeout)
        if key not in self._delivered:
            raise KafkaClientError(f"exchange: writing {message['kind']!r} to {self._agree!r} failed")
        return self._delivered.pop(key)

    def _generation_message(self, m: dict, offset: int) -> None:
        if m["kind"] == "hello":
            if self.index == 0 and self.generation is not None:
                self._write(self._announcement(self.start))
            return
        generation, start = m.get("generation"), m.get("start")
        announced = (generation, offset if start is None else start, m.get("origin", UNKNOWN))
        if self.index != 0 and self.generation is not None and generation != self.generation:
            raise GenerationChanged(
                f"worker 0 started generation {generation} (agree-topic offset {announced[1]}) while worker "
                f"{self.index} is in generation {self.generation}: its state is void; restarted, it joins the new one")
        if self.index != 0:
            self._announced = announced
