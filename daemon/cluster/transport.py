"""Exchange topics: the engine's worker transport (`ddflow.operators.transport.Transport`) over Kafka.

Workers in separate processes or hosts exchange updates through the broker every deployment
already runs, never a socket protocol of their own. For ``W`` workers and a ``prefix``:

* exchange point ``c`` is the topic ``{prefix}-exchange-{c}`` with ``W`` partitions: partition ``d``
  holds what the workers send to worker ``d``, who reads only that partition;
* agreements (the common frontier, the next loop round, whether any worker has work) go to
  ``{prefix}-agree`` (one partition), which every worker reads whole.

Messages (`transport_wire`) are msgpack maps tagged with the ``run`` they belong to and its
``gen``\\ eration (messages of other runs or generations in the same topics are skipped), as in
the result topics' protocol: a receiver holds all of an exchange step once it has a marker from
every other worker and as many updates of that marker's sender incarnation (``inc``, one per
process) as it counts. Replays are exact: the first marker per ``(source, channel, seq)`` and the
first vote per ``(source, seq)`` win, so what a restarted worker re-sends for a step or agreement
the others already hold is dropped, and a restarted worker re-reading the topics takes every step
and agreement as it was first decided (its own earlier votes included). Messages of steps and
agreements a worker is past are dropped on arrival.

**Generations** (`generations`): a run's exchange history is valid only for the state it was built
from; worker 0 decides which generation the workers are in, and a worker whose generation ended
raises `GenerationChanged`.

Topics are created on first use with ``W`` partitions; one with another partition count is refused.
A worker that waits longer than ``timeout`` seconds for the others raises `ExchangeTimeout` naming
the step and the workers it still waits for.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from ...operators.errors import TransportAborted
from ...operators.transport import ExchangeBatch, ExchangeMarker
from ..exceptions import DaemonError, KafkaClientError
from ..kafka.client import _admin, client_config, ensure_topics
from .generations import UNKNOWN, GenerationChanged, Generations  # GenerationChanged: re-exported
from .transport_wire import (Box, ExchangeMessageError, Refusals, batch_messages, decode_message, marker_message,
                             step_batches, step_complete)

__all__ = ["ExchangeTimeout", "GenerationChanged", "Interrupted", "KafkaTransport"]


# how long the broker holds a fetch of the exchange topics when there is nothing new: the exchange is
# on every epoch's critical path (librdkafka's default, 500 ms, would be paid at every step)
FETCH_WAIT_MS = 1


AGREE = -1  # the agree topic's place among the channels held (`KafkaTransport._hold`)


class ExchangeTimeout(DaemonError):
    """The other workers did not complete an exchange step or agreement in time."""


class Interrupted(TransportAborted):
    """A wait that may be interrupted (see `KafkaTransport.interruptible`) was: the worker stops."""


class KafkaTransport(Generations):
    """Worker ``index``'s end of the exchange topics of ``workers`` workers (see the module).

    ``waited[j]``: seconds this worker has spent blocked in an exchange step or agreement while
    worker ``j`` had not yet delivered its part (a slice of waiting counts for every worker it waited
    for); ``waiting_on``: the workers it is blocked on right now (empty when not waiting). They say
    which worker holds the others back. ``stop()``: when it returns True, a wait made while
    ``interruptible`` is set raises `Interrupted`. ``read_ahead``: how many exchange steps (and,
    once joined, agreements) beyond the one it is at a worker reads and keeps; a replaying worker
    reads what lies further again from the broker when it gets there (``held``/``peak_held``: the
    messages and votes kept now / at most)."""

    def __init__(self, workers: int, index: int, kafka_options: Mapping[str, Any], *, prefix: str, run: str,
                 timeout: float = 60.0, max_batch: int = 5000, stop: Callable[[], bool] | None = None,
                 read_ahead: int = 2) -> None:
        if type(workers) is not int or workers < 1 or type(index) is not int or not 0 <= index < workers:
            raise DaemonError(f"exchange: worker {index!r} of {workers!r} is not a worker index below a positive count")
        self.workers, self.index, self.prefix, self.run = workers, index, prefix, run
        self.timeout, self.max_batch = timeout, max_batch
        if type(read_ahead) is not int or read_ahead < 2:
            raise DaemonError(f"exchange: read_ahead must be an int of at least 2 steps, got {read_ahead!r}")
        self.read_ahead = read_ahead
        self.stop = stop or (lambda: False)
        self.interruptible = False
        self.kafka_options = dict(kafka_options)
        self.generation: str | None = None  # set by join(); None: messages name no generation
        self.start: int = 0  # the agree-topic offset where the generation began
        self.origin: Any = UNKNOWN  # what the generation started from (join): a snapshot's identity or None
        self.incarnation = uuid.uuid4().hex[:12]
        who = f"exchange worker {index}"
        self.producer = Producer(client_config(kafka_options, {"enable.idempotence": True, "linger.ms": 1,
                                                               "socket.nagle.disable": True}, who=who))
        self.consumer = Consumer(client_config(kafka_options, {
            "group.id": f"{prefix}-{run}-{index}", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": FETCH_WAIT_MS, "socket.nagle.disable": True,
        }, who=who))
        self._topics: dict[int, str] = {}
        self._starts: dict[int, int] = {}  # channel -> offset its partition is read from (join)
        self._boxes: dict[tuple[int, int], Box] = {}
        self._votes: dict[int, dict[int, Any]] = {}
        self._vote_at: dict[int, int] = {}  # per agreement pending here, the offset of its first vote read
        self._read: dict[tuple[str, int], int] = {}  # per partition read, the offset after the last message
        self._next_vote = 0  # agreements before it are decided: their votes are dropped on arrival
        self._next_step: dict[int, int] = {}  # per channel, the steps before it are received
        self._error: BaseException | None = None
        self.refused = Refusals(index)  # messages not of this run's workers: skipped and said (`transport_wire`)
        self._admin: Any = _admin(self.kafka_options)
        self._agree = self._ensure(f"{prefix}-agree", 1)
        self._assigned = False
        self._agree_from = 0
        self._announced: tuple[str, int, Any] | None = None  # (generation, start, origin) worker 0 announced
        self._delivered: dict[str, int] = {}
        self.sent_messages = 0
        self.waited: dict[int, float] = {}  # seconds this worker spent blocked on each other worker
        self.waiting_on: tuple[int, ...] = ()  # the workers it is blocked on right now
        self.waiting_since: float | None = None  # monotonic time the current wait began (None: not waiting)
        self.received_messages = 0
        self.held = 0  # exchange messages and votes read and kept for steps and agreements not done yet
        self._joined = False  # join() done: from then on the agree topic is read ahead only so far
        self.peak_held = 0
        self._ahead: dict[tuple[str, int], tuple[int, int]] = {}  # paused partition -> (channel, step) of the message held

    # -- topics and generations ----------------------------------------------------------------------

    def _ensure(self, topic: str, partitions: int) -> str:
        ensure_topics(self.kafka_options, {topic: partitions})
        admin = self._admin
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                info = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            except KafkaException as exc:
                raise KafkaClientError(f"exchange: reading metadata of {topic!r}: {exc}") from exc
            if info is not None and info.error is None and info.partitions:
                if len(info.partitions) != partitions:
                    raise DaemonError(f"exchange topic {topic!r} has {len(info.partitions)} partitions, the "
                                      f"{self.workers} workers need {partitions}: delete it or use another prefix")
                return topic
            if time.monotonic() > deadline:
                raise KafkaClientError(f"exchange: topic {topic!r} did not appear with {partitions} partitions")
            time.sleep(0.05)

    def _assign_agree(self, offset: int) -> None:
        self._ahead.pop((self._agree, 0), None)
        self.consumer.assign([TopicPartition(self._agree, 0, offset)])
        self._assigned = True
        self._agree_from = max(offset, 0)
        self._read.pop((self._agree, 0), None)

    def _channel(self, channel: int) -> str:
        topic = self._topics.get(channel)
        if topic is None:
            if not self._assigned:
                self._assign_agree(OFFSET_BEGINNING)
            topic = self._ensure(f"{self.prefix}-exchange-{channel}", self.workers)
            self.consumer.incremental_assign([TopicPartition(topic, self.index, self._starts.get(channel, 0))])
            self._topics[channel] = topic
        return topic

    # -- sending -----------------------------------------------------------------------------------

    def _produce(self, topic: str, partition: int, message: dict) -> None:
        message["run"], message["gen"] = self.run, self.generation
        try:
            value = msgpack.packb(message, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise DaemonError(f"exchange {topic}: a record cannot be encoded in msgpack ({exc})") from exc
        while True:
            try:
                self.producer.produce(topic, value, partition=partition)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)
        self.sent_messages += 1

    def send(self, batch: ExchangeBatch) -> None:
        topic = self._channel(batch.channel)
        for message in batch_messages(batch, incarnation=self.incarnation, max_batch=self.max_batch):
            self._produce(topic, batch.dest, message)

    def mark(self, marker: ExchangeMarker) -> None:
        self._produce(self._channel(marker.channel), marker.dest, marker_message(marker, incarnation=self.incarnation))

    # -- receiving ---------------------------------------------------------------------------------

    def receive(self, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
        self._channel(channel)
        box = self._boxes.setdefault((channel, seq), ({}, {}))
        self._wait(lambda: step_complete(box, self.workers), f"exchange {channel} step {seq}",
                   lambda: sorted(set(range(self.workers)) - {worker} - set(box[1])))
        self._drop((channel, seq))
        self._next_step[channel] = max(self._next_step.get(channel, 0), seq + 1)
        self._read_on()
        return step_batches(box, worker, channel, seq)

    def gather(self, worker: int, seq: int, value: Any) -> list[Any]:
        self._produce(self._agree, 0, {"kind": "vote", "seq": seq, "source": worker, "value": value})
        votes = self._votes.setdefault(seq, {})
        self._wait(lambda: len(votes) == self.workers, f"agreement {seq}",
                   lambda: sorted(set(range(self.workers)) - set(votes)))
        del self._votes[seq]
        self.held -= len(votes)
        self._vote_at.pop(seq, None)
        self._next_vote = max(self._next_vote, seq + 1)
        self._read_on()
        return [votes[i] for i in range(self.workers)]

    def positions(self) -> dict[str, Any]:
        """Where a restart re-reads the topics to find every agreement and exchange step not
        decided here yet: ``agree`` (offset) and ``exchange`` (channel -> offset of this worker's
        partition); see `join`. Taken between two steps, with `resume`'s counters."""
        agree = min([*self._vote_at.values(), self._read.get((self._agree, 0), self._agree_from)])
        exchange = {}
        for channel, topic in self._topics.items():
            pending = [m["_at"] for (c, _), (parts, markers) in self._boxes.items() if c == channel
                       for m in [*markers.values(), *(m for incs in parts.values() for ms in incs.values()
                                                      for m in ms.values())]]
            exchange[channel] = min([*pending, self._read.get((topic, self.index), self._starts.get(channel, 0))])
        return {"agree": agree, "exchange": exchange}

    def resume(self, agreements: int, steps: list[int]) -> None:
        """A restored worker is at agreement ``agreements`` and at ``steps[c]`` of exchange point
        ``c``: messages of earlier ones are dropped."""
        self._next_vote = agreements
        self._next_step = dict(enumerate(steps))
        for seq in [s for s in self._votes if s < agreements]:
            self.held -= len(self._votes.pop(seq))
            self._vote_at.pop(seq, None)
        for key in [k for k in self._boxes if k[1] < self._next_step.get(k[0], 0)]:
            self._drop(key)
        self._read_on()

    def _drop(self, key: tuple[int, int]) -> None:
        """Forget the messages of exchange step ``key`` (received, or one this worker is past)."""
        parts, markers = self._boxes.pop(key)
        self.held -= len(markers) + sum(len(ms) for incs in parts.values() for ms in incs.values())

    def _hold(self, topic: str, partition: int, channel: int, seq: int, offset: int) -> None:
        """The message at ``offset`` is a step (or agreement, ``channel`` `AGREE`) further ahead
        than ``read_ahead``: stop reading the partition there (paused, and sought back so that the
        message is read again) until this worker's steps of ``channel`` move on. A step is complete
        before any message of a step two further is written after it (every sender needs the step
        in between from every worker; likewise every vote of an agreement precedes the votes of
        the one after the next), so a worker never waits for what lies beyond the message held.
        The agree topic is held only once the worker joined (its generation's announcement
        follows its hello, whatever votes lie between); while it is held, hellos behind it are
        answered when the worker reads on."""
        tp = TopicPartition(topic, partition, offset)
        self.consumer.pause([tp])
        self.consumer.seek(tp)
        self._ahead[(topic, partition)] = (channel, seq)
        self._read[(topic, partition)] = offset  # what `positions` re-reads from

    def _read_on(self) -> None:
        """Read on the partitions held whose message held is now within ``read_ahead`` steps (or
        agreements: the agree topic's ``channel`` is `AGREE`)."""
        for (topic, partition), (channel, seq) in list(self._ahead.items()):
            if seq < (self._next_vote if channel == AGREE else self._next_step.get(channel, 0)) + self.read_ahead:
                del self._ahead[(topic, partition)]
                self.consumer.resume([TopicPartition(topic, partition)])

    def voted(self, seq: int) -> bool:
        """Whether some worker (this one's earlier incarnation included) voted in agreement ``seq``,
        as far as the messages that arrived by now tell (no waiting)."""
        if not self._assigned:
            self._assign_agree(OFFSET_BEGINNING)
        self._take(self._consume(0))
        return bool(self._votes.get(seq))

    def abort(self, error: BaseException) -> None:
        self._error = error

    def _wait(self, done, what: str, missing) -> None:
        self.producer.flush(self.timeout)
        now = time.monotonic()
        deadline = now + self.timeout
        self.waiting_since = now
        try:
            while not done():
                blocked = tuple(p for p in missing() if p != self.index)  # not its own round trip
                self.waiting_on = blocked
                self._poll(deadline, what, blocked)
                then, now = now, time.monotonic()
                for peer in blocked:  # a slice of waiting is charged to every worker it waited for
                    self.waited[peer] = self.waited.get(peer, 0.0) + (now - then)
        finally:
            self.waiting_on = ()
            self.waiting_since = None

    def _poll(self, deadline: float, what: str, missing: tuple[int, ...]) -> None:
        """Read what the exchange topics hold for this worker (at most one poll's wait)."""
        if self._error is not None:
            raise TransportAborted(f"another worker failed: {self._error!r}")
        if self.interruptible and self.stop():
            raise Interrupted(f"{what}: stopped while waiting for workers {list(missing)}")
        if time.monotonic() > deadline:
            raise ExchangeTimeout(f"{what}: worker {self.index} waited {self.timeout:g} s for workers "
                                  f"{list(missing)} (run {self.run!r})")
        if not self._assigned:
            self._assign_agree(OFFSET_BEGINNING)
        self._take(self._consume(0.05))

    def _consume(self, timeout: float) -> list[Any]:
        first = self.consumer.poll(timeout)  # returns with the first message (consume waits out its timeout)
        return [] if first is None else [first, *self.consumer.consume(1000, timeout=0)]

    def _take(self, messages: list[Any]) -> None:
        for msg in messages:
            if msg.error() is None:
                key = (msg.topic(), msg.partition())
                if key in self._ahead:  # held: read again from the message held once the worker gets there
                    continue
                self._read[key] = msg.offset() + 1
                try:
                    self._file(msg.value(), msg.offset(), key)
                except ExchangeMessageError as exc:
                    self.refused.refuse(msg.topic(), msg.partition(), msg.offset(), exc)

    def _file(self, value: bytes, offset: int, where: tuple[str, int] | None = None) -> None:
        m = decode_message(value, run=self.run, workers=self.workers)
        if m is None:  # another run's
            return
        kind = m.get("kind")
        if kind in ("hello", "generation"):
            self._generation_message(m, offset)
            return
        if m.get("gen") != self.generation:
            return
        self.received_messages += 1
        m["_at"] = offset
        if kind == "vote":
            if m["seq"] >= self._next_vote:
                if where is not None and self._joined and m["seq"] >= self._next_vote + self.read_ahead:
                    self._hold(*where, AGREE, m["seq"], offset)
                    return
                votes = self._votes.setdefault(m["seq"], {})
                if m["source"] not in votes:  # the first vote wins
                    votes[m["source"]] = m["value"]
                    self.held += 1
                    self.peak_held = max(self.peak_held, self.held)
                self._vote_at.setdefault(m["seq"], offset)
        elif kind in ("batch", "marker") and m["seq"] >= self._next_step.get(m["channel"], 0):
            channel = m["channel"]
            if where is not None and m["seq"] >= self._next_step.get(channel, 0) + self.read_ahead:
                self._hold(*where, channel, m["seq"], offset)
                return
            parts, markers = self._boxes.setdefault((channel, m["seq"]), ({}, {}))
            if kind == "batch":
                m["n"] = len(m["diffs"]) // 8
                box = parts.setdefault(m["source"], {}).setdefault(m.get("inc", ""), {})
                if m["part"] not in box:
                    box[m["part"]] = m
                    self.held += 1
            elif m["source"] not in markers:  # the first complete attempt of a step wins
                markers[m["source"]] = m
                self.held += 1
            self.peak_held = max(self.peak_held, self.held)

    def close(self) -> None:
        """Flush what was sent and close the clients."""
        self.producer.flush(self.timeout)
        self.consumer.close()
        self._admin = None  # the clients' threads end when they are collected
