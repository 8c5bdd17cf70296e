"""Exchange topics: the engine's worker transport (`ddflow.operators.transport.Transport`) over Kafka.

Workers in separate processes or hosts exchange updates through the broker every deployment
already runs, never a socket protocol of their own. For ``W`` workers and a ``prefix``:

* exchange point ``c`` is the topic ``{prefix}-exchange-{c}`` with ``W`` partitions: partition ``d``
  holds what the workers send to worker ``d``, who reads only that partition;
* agreements (the common frontier, the next loop round, whether any worker has work) go to
  ``{prefix}-agree`` (one partition), which every worker reads whole.

Messages are msgpack maps tagged with the ``run`` they belong to (messages of other runs in the same
topics are skipped):

    batch   {"run", "kind": "batch", "channel", "seq", "source", "dest", "lower", "upper", "rounds",
             "part", "records": [data, ...] or None, "columns": int64 bytes or None, "width",
             "times": int64 bytes, "depth", "diffs": int64 bytes}    (at most ``max_batch`` updates;
             records of ints or pairs of ints travel as one or two little-endian int64 columns)
    marker  {"run", "kind": "marker", "channel", "seq", "source", "dest", "lower", "upper", "rounds",
             "count"}                                                 (the updates sent in the step)
    vote    {"run", "kind": "vote", "seq", "source", "value"}

as in the result topics' protocol: a receiver holds all of an exchange step once it has a marker
from every other worker and as many updates as they count; a batch or marker seen twice (a resend)
is dropped by its ``(source, channel, seq)``. Topics are created on first use with ``W`` partitions;
one with another partition count is refused. A worker that waits longer than ``timeout`` seconds
for the others raises `ExchangeTimeout` naming the step and the workers it still waits for.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from ..operators.errors import TransportAborted
from ..operators.transport import ExchangeBatch, ExchangeMarker
from .exceptions import DaemonError, KafkaClientError
from .kafka import _admin, client_config, ensure_topics
from .wire import to_record

__all__ = ["ExchangeTimeout", "KafkaTransport"]


def _bytes(column: np.ndarray) -> bytes:
    """An int64 array as little-endian bytes (row-major)."""
    return np.ascontiguousarray(column, dtype="<i8").tobytes()


class ExchangeTimeout(DaemonError):
    """The other workers did not complete an exchange step or agreement in time."""


class KafkaTransport:
    """Worker ``index``'s end of the exchange topics of ``workers`` workers (see the module).

    ``waited[j]``: seconds this worker has spent blocked in an exchange step or agreement while
    worker ``j`` had not yet delivered its part (a slice of waiting counts for every worker it waited
    for); ``waiting_on``: the workers it is blocked on right now (empty when not waiting). They say
    which worker holds the others back."""

    def __init__(self, workers: int, index: int, kafka_options: Mapping[str, Any], *, prefix: str, run: str,
                 timeout: float = 60.0, max_batch: int = 5000) -> None:
        if type(workers) is not int or workers < 1 or type(index) is not int or not 0 <= index < workers:
            raise DaemonError(f"exchange: worker {index!r} of {workers!r} is not a worker index below a positive count")
        self.workers, self.index, self.prefix, self.run = workers, index, prefix, run
        self.timeout, self.max_batch = timeout, max_batch
        self.kafka_options = dict(kafka_options)
        who = f"exchange worker {index}"
        self.producer = Producer(client_config(kafka_options, {"enable.idempotence": True, "linger.ms": 1}, who=who))
        self.consumer = Consumer(client_config(kafka_options, {
            "group.id": f"{prefix}-{run}-{index}", "enable.auto.commit": False, "auto.offset.reset": "earliest",
        }, who=who))
        self._topics: dict[int, str] = {}
        self._boxes: dict[tuple[int, int], tuple[dict[int, list], dict[int, dict]]] = {}
        self._votes: dict[int, dict[int, Any]] = {}
        self._error: BaseException | None = None
        self._admin: Any = _admin(self.kafka_options)
        agree = self._ensure(f"{prefix}-agree", 1)
        self.consumer.assign([TopicPartition(agree, 0, OFFSET_BEGINNING)])
        self._agree = agree
        self.sent_messages = 0
        self.waited: dict[int, float] = {}  # seconds this worker spent blocked on each other worker
        self.waiting_on: tuple[int, ...] = ()  # the workers it is blocked on right now
        self.received_messages = 0

    # -- topics ------------------------------------------------------------------------------------

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

    def _channel(self, channel: int) -> str:
        topic = self._topics.get(channel)
        if topic is None:
            topic = self._ensure(f"{self.prefix}-exchange-{channel}", self.workers)
            self.consumer.incremental_assign([TopicPartition(topic, self.index, OFFSET_BEGINNING)])
            self._topics[channel] = topic
        return topic

    # -- sending -----------------------------------------------------------------------------------

    def _produce(self, topic: str, partition: int, message: dict) -> None:
        message["run"] = self.run
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
        head = {"kind": "batch", "channel": batch.channel, "seq": batch.seq, "source": batch.source,
                "dest": batch.dest, "lower": batch.lower, "upper": batch.upper, "rounds": list(batch.rounds)}
        columnar = isinstance(batch.records, np.ndarray)
        depth = batch.times.shape[1]
        for start in range(0, len(batch.diffs), self.max_batch):
            end = start + self.max_batch
            records = batch.records[start:end]
            self._produce(topic, batch.dest, {
                **head, "part": start, "depth": depth, "width": records.shape[1] if columnar and records.ndim == 2 else 1,
                "records": None if columnar else list(records),
                "columns": _bytes(records) if columnar else None,
                "times": _bytes(batch.times[start:end]), "diffs": _bytes(batch.diffs[start:end])})

    def mark(self, marker: ExchangeMarker) -> None:
        self._produce(self._channel(marker.channel), marker.dest, {
            "kind": "marker", "channel": marker.channel, "seq": marker.seq, "source": marker.source,
            "dest": marker.dest, "lower": marker.lower, "upper": marker.upper, "rounds": list(marker.rounds),
            "count": marker.count})

    # -- receiving ---------------------------------------------------------------------------------

    def receive(self, worker: int, channel: int, seq: int) -> list[ExchangeBatch]:
        self._channel(channel)
        box = self._boxes.setdefault((channel, seq), ({}, {}))
        others = self.workers - 1
        self._wait(lambda: len(box[1]) >= others and all(
            sum(m["n"] for m in box[0].get(s, {}).values()) == mk["count"] for s, mk in box[1].items()),
            f"exchange {channel} step {seq}", lambda: sorted(set(range(self.workers)) - {worker} - set(box[1])))
        del self._boxes[(channel, seq)]
        out = []
        for source, parts in sorted(box[0].items()):
            msgs = [parts[k] for k in sorted(parts)]
            head = msgs[0]
            if head["records"] is None:
                cols = [np.frombuffer(m["columns"], dtype="<i8") for m in msgs]
                records: list | np.ndarray = np.concatenate(cols).astype(np.int64)
                if head["width"] == 2:
                    records = records.reshape(-1, 2)
            else:
                records = [to_record(r) for m in msgs for r in m["records"]]
            times = np.concatenate([np.frombuffer(m["times"], dtype="<i8") for m in msgs]).astype(np.int64)
            diffs = np.concatenate([np.frombuffer(m["diffs"], dtype="<i8") for m in msgs]).astype(np.int64)
            out.append(ExchangeBatch(channel, seq, source, worker, head["lower"], head["upper"], tuple(head["rounds"]),
                                     records, times.reshape(len(diffs), head["depth"]), diffs))
        return out

    def gather(self, worker: int, seq: int, value: Any) -> list[Any]:
        self._produce(self._agree, 0, {"kind": "vote", "seq": seq, "source": worker, "value": value})
        votes = self._votes.setdefault(seq, {})
        self._wait(lambda: len(votes) == self.workers, f"agreement {seq}",
                   lambda: sorted(set(range(self.workers)) - set(votes)))
        del self._votes[seq]
        return [votes[i] for i in range(self.workers)]

    def abort(self, error: BaseException) -> None:
        self._error = error

    def _wait(self, done, what: str, missing) -> None:
        self.producer.flush(self.timeout)
        now = time.monotonic()
        deadline = now + self.timeout
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

    def _poll(self, deadline: float, what: str, missing: tuple[int, ...]) -> None:
        """Read what the exchange topics hold for this worker (at most one poll's wait)."""
        if self._error is not None:
            raise TransportAborted(f"another worker failed: {self._error!r}")
        if time.monotonic() > deadline:
            raise ExchangeTimeout(f"{what}: worker {self.index} waited {self.timeout:g} s for workers "
                                  f"{list(missing)} (run {self.run!r})")
        first = self.consumer.poll(0.05)  # returns with the first message (consume waits out its timeout)
        if first is None:
            return
        for msg in [first, *self.consumer.consume(1000, timeout=0)]:
            if msg.error() is None:
                self._file(msg.value())

    def _file(self, value: bytes) -> None:
        m = msgpack.unpackb(value, raw=False, use_list=True, strict_map_key=False)
        if not isinstance(m, dict) or m.get("run") != self.run:
            return
        self.received_messages += 1
        kind = m.get("kind")
        if kind == "vote":
            self._votes.setdefault(m["seq"], {}).setdefault(m["source"], m["value"])
        elif kind in ("batch", "marker"):
            batches, markers = self._boxes.setdefault((m["channel"], m["seq"]), ({}, {}))
            if kind == "batch":
                m["n"] = len(m["diffs"]) // 8
                batches.setdefault(m["source"], {}).setdefault(m["part"], m)  # a resend is dropped
            else:
                markers.setdefault(m["source"], m)

    def close(self) -> None:
        """Flush what was sent and close the clients."""
        self.producer.flush(self.timeout)
        self.consumer.close()
        self._admin = None  # the clients' threads end when they are collected
