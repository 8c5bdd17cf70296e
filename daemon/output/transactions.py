"""Committing a window to Kafka: the producer calls of a sink, transactional or idempotent.

`TransactionalPublisher._commit` makes one commit window (`commits.Window`: its staged dead
letters, then its epochs' messages in order) durable with the consumed input offsets. With
transactions (``transactional``), all of it commits in one Kafka transaction, the offsets through
``send_offsets_to_transaction`` for the consumer group; an abortable failure aborts and re-sends the
window under a new incarnation (`_reincarnate`: a consumer must not mix the messages of two
attempts), up to ``max_attempts``. Without them the producer is idempotent: the sink flushes, and
the input offsets are committed afterwards through a consumer that reads nothing
(`_offset_committer`). A commit that does not land raises `KafkaClientError`, naming the window.
`_commit` changes none of the sink's state, so it may run in the committer's thread.

Every blocking producer call is bounded by ``transaction_timeout`` (also the producer's
``transaction.timeout.ms``): a broker that stalls for less is ridden out, one that stalls longer
(or a librdkafka call that ignores its timeout) fails the epoch with a `KafkaClientError` naming the
call, and the daemon exits for its supervisor to restart it.

A fenced producer (another daemon initialised transactions with the same ``transactional.id``)
learns it only at its next transactional request, and an idle daemon makes none. So while
transactional, `start_fence_checks` runs an empty transaction every ``FENCE_CHECK_S`` seconds in
which no commit ran: it commits offset 0 of the first output's partition 0 for a consumer group
of its own (``<transactional.id>.fence-check``, never the input group), which the broker refuses
to a fenced producer. A refusal (here or in a commit) sets ``fenced`` to a message naming the
transactional id and what to do, and raises `Fenced`; no commit is retried after it. Commits and
checks hold ``_txn_lock``, so they never interleave on the producer.

The sink (`sink.KafkaSink`) provides ``_producer`` (None until open), ``transactional``,
``transaction_timeout``, ``max_attempts``, ``incarnation``, ``group_id``, ``_committer`` (None until
first needed), ``_kafka_options`` and ``_encoders`` (topic -> the encoder of the output writing it).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka import KafkaError as RdKafkaError

from ..exceptions import BrokerTimeout, Fenced, KafkaClientError
from ..formats.types import Encoder, Message
from ..kafka.client import bounded, client_config
from .commits import Window

__all__ = ["TransactionalPublisher"]

log = logging.getLogger("ddflow.daemon.output.sink")

FENCE_CHECK_S = 2.0  # an idle transactional producer checks this often that no other instance fenced it

# librdkafka's and the broker's errors that mean another producer took over the transactional id
_FENCED_CODES = frozenset(getattr(RdKafkaError, name) for name in ("_FENCED", "PRODUCER_FENCED",
                                                                   "INVALID_PRODUCER_EPOCH")
                          if hasattr(RdKafkaError, name))


def _is_fenced(error: Any) -> bool:
    return error is not None and hasattr(error, "code") and error.code() in _FENCED_CODES


class TransactionalPublisher:
    """The producer of a sink and the commit of one window through it."""

    _producer: Producer | None
    _committer: Consumer | None
    _kafka_options: dict[str, Any]
    _encoders: dict[str, Encoder]
    transactional: bool
    transaction_timeout: float
    max_attempts: int
    incarnation: str
    group_id: str | None
    _transactional_id: str | None
    fenced: str | None = None  # why this producer may publish nothing more (another instance took over)
    _last_transaction = 0.0  # monotonic time the last commit or fence check ended
    _fence_stop: threading.Event | None = None  # set to end the fence checks (None: not running)

    @property
    def _txn_lock(self) -> threading.Lock:
        """Held by a commit and by a fence check: one transaction at a time on the producer."""
        lock = self.__dict__.get("_txn_lock_")
        return lock if lock is not None else self.__dict__.setdefault("_txn_lock_", threading.Lock())

    def _fenced(self, exc: BaseException) -> Fenced:
        """The `Fenced` error to raise (and ``fenced`` set) for a refusal ``exc`` of the broker."""
        if self.fenced is None:
            self.fenced = (
                f"fenced: another instance initialised transactions with transactional.id "
                f"{self._transactional_id!r} (a second daemon with this config: the same kafka.group_id and "
                f"worker index), so this one may publish nothing more and exits; run one daemon per group_id "
                f"and worker index ({exc})")
        return Fenced(self.fenced)

    def start_fence_checks(self) -> None:
        """While transactional, check every ``FENCE_CHECK_S`` idle seconds that no other instance
        fenced this producer (see the module docstring), in a daemon thread until `stop_fence_checks`."""
        if not self.transactional or self._fence_stop is not None:
            return
        topic = next(iter(self._encoders))
        group = Consumer(client_config(self._kafka_options, {"group.id": f"{self._transactional_id}.fence-check",
                                                             "enable.auto.commit": False}, who="fence check"))
        self._fence_stop = stop = threading.Event()
        self._last_transaction = time.monotonic()

        def run() -> None:
            try:
                while not stop.wait(FENCE_CHECK_S / 4) and self.fenced is None:
                    if time.monotonic() - self._last_transaction >= FENCE_CHECK_S and self._txn_lock.acquire(False):
                        try:
                            self._check_fence([TopicPartition(topic, 0, 0)], group)
                        finally:
                            self._txn_lock.release()
            finally:
                group.close()

        threading.Thread(target=run, name="ddflow-fence-check", daemon=True).start()

    def stop_fence_checks(self) -> None:
        stop = self._fence_stop
        if stop is not None:
            stop.set()
            self._fence_stop = None

    def _check_fence(self, probe: list[TopicPartition], group: Consumer) -> None:
        """One empty transaction committing ``probe`` for ``group``: a fenced producer is refused."""
        producer, timeout = self._producer, self.transaction_timeout
        if producer is None or self._fence_stop is None:
            return
        try:
            producer.begin_transaction()
            self._bounded(lambda: producer.send_offsets_to_transaction(probe, group.consumer_group_metadata(),
                                                                       timeout), "send_offsets_to_transaction",
                          "checking that no other instance fenced the producer")
            self._bounded(lambda: producer.commit_transaction(timeout), "commit_transaction",
                          "checking that no other instance fenced the producer")
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if _is_fenced(error):
                log.error("%s", self._fenced(exc))
                return
            log.info("checking for fencing: %s (the next commit retries)", exc)
            try:
                self._bounded(lambda: producer.abort_transaction(timeout), "abort_transaction", "checking for fencing")
            except (KafkaException, KafkaClientError) as abort_exc:
                log.warning("aborting the fence check's transaction: %s", abort_exc)
        except KafkaClientError as exc:  # a bound ran out: the broker is silent (the service says so)
            log.info("checking for fencing: %s", exc)
        finally:
            self._last_transaction = time.monotonic()

    def _bounded(self, call: Any, name: str, what: str) -> Any:
        """``call()`` (a producer call given ``transaction_timeout``), bounded even if librdkafka
        ignores the timeout; a timeout names the call and ``kafka.transaction_timeout``."""
        try:
            return bounded(call, self.transaction_timeout, f"{what}: {name}")
        except BrokerTimeout as exc:
            raise BrokerTimeout(f"{exc} (kafka.transaction_timeout = {self.transaction_timeout:g} s)") from None

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise KafkaClientError("output producer: the sink is not open (call open() first)")
        return self._producer

    def _produce_all(self, producer: Producer, messages: list[Message], on_delivery: Any) -> None:
        for topic, partition, key, value, headers in messages:
            self._produce(producer, topic, partition, key, value, headers, on_delivery)

    def _produce(
        self,
        producer: Producer,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        on_delivery: Any,
    ) -> None:
        kwargs: dict[str, Any] = {"on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if key is not None:
            kwargs["key"] = key
        if headers:
            kwargs["headers"] = headers
        deadline: float | None = None
        while True:
            try:
                producer.produce(topic, value, **kwargs)
                return
            except BufferError:
                now = time.monotonic()
                deadline = now + self.transaction_timeout if deadline is None else deadline
                if now >= deadline:  # the broker takes nothing: the queue never drains
                    raise KafkaClientError(f"producing to {topic}[{partition}]: the producer's queue stayed full for "
                                     f"{self.transaction_timeout:g} s (kafka.transaction_timeout)") from None
                producer.poll(0.05)

    def _commit(
        self, window: Window, offsets: list[TopicPartition] | None, consumer: Consumer | None
    ) -> tuple[Window, dict[tuple[str, int], int], str]:
        """Commit ``window`` (in the committer's thread: it changes none of the sink's state):
        its staged dead letters and messages, and the input ``offsets``, retrying an abortable
        failure under a new incarnation. Returns the window, the offset of the last message
        delivered per partition, and the incarnation that committed it."""
        with self._txn_lock:
            try:
                return self._commit_locked(window, offsets, consumer)
            finally:
                self._last_transaction = time.monotonic()

    def _commit_locked(
        self, window: Window, offsets: list[TopicPartition] | None, consumer: Consumer | None
    ) -> tuple[Window, dict[tuple[str, int], int], str]:
        if self.fenced is not None:
            raise Fenced(self.fenced)
        producer = self.producer
        what = window.describe()
        messages = window.extra["staged"] + window.items
        incarnation = self.incarnation
        for attempt in range(1, self.max_attempts + 1):
            delivered: dict[tuple[str, int], int] = {}
            errors: list[str] = []

            def on_delivery(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")
                else:
                    key = (msg.topic(), msg.partition())
                    if msg.offset() > delivered.get(key, -1):
                        delivered[key] = msg.offset()

            try:
                timeout = self.transaction_timeout
                if self.transactional:
                    producer.begin_transaction()
                    self._produce_all(producer, messages, on_delivery)
                    if offsets and consumer is not None:
                        group = consumer.consumer_group_metadata()
                        self._bounded(lambda: producer.send_offsets_to_transaction(offsets, group, timeout),
                                      "send_offsets_to_transaction", f"publishing {what}")
                    self._bounded(lambda: producer.commit_transaction(timeout), "commit_transaction",
                                  f"publishing {what}")
                else:
                    self._produce_all(producer, messages, on_delivery)
                    remaining = self._bounded(lambda: producer.flush(timeout), "flush", f"publishing {what}")
                    if remaining:
                        raise KafkaClientError(f"publishing {what}: {remaining} messages not delivered in {timeout:g} s "
                                         "(kafka.transaction_timeout)")
                    if offsets and consumer is not None:
                        self._bounded(lambda: consumer.commit(offsets=offsets, asynchronous=False), "commit",
                                      f"publishing {what}: committing the input offsets")
                if errors:
                    raise KafkaClientError(f"publishing {what}: {len(errors)} deliveries failed, first: {errors[0]}")
                return window, delivered, incarnation
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if self.transactional and _is_fenced(error):
                    raise self._fenced(exc) from exc
                abortable = self.transactional and error is not None and error.txn_requires_abort()
                if not abortable or attempt == self.max_attempts:
                    timed_out = error is not None and error.code() == RdKafkaError._TIMED_OUT
                    note = (f" (the broker did not answer within kafka.transaction_timeout = "
                            f"{self.transaction_timeout:g} s)" if timed_out else "")
                    raise KafkaClientError(f"publishing {what} (attempt {attempt}): {exc}{note}") from exc
                log.warning("publishing %s failed (%s); aborting and re-sending under a new incarnation", what, exc)
                try:
                    self._bounded(lambda: producer.abort_transaction(self.transaction_timeout), "abort_transaction",
                                  f"publishing {what} (attempt {attempt})")
                except KafkaException as abort_exc:
                    raise KafkaClientError(f"publishing {what} (attempt {attempt}): {exc}; aborting the transaction "
                                     f"failed too: {abort_exc}") from abort_exc
                incarnation = uuid.uuid4().hex[:16]
                messages = self._reincarnate(messages, incarnation)
        raise AssertionError("unreachable")  # the last attempt returned or raised

    def _offset_committer(self) -> Consumer:
        """The consumer (of ``group_id``, assigned nothing) that commits input offsets."""
        if self._committer is None:
            role = {"group.id": self.group_id, "enable.auto.commit": False}
            self._committer = Consumer(client_config(self._kafka_options, role, who="offset committer"))
        return self._committer

    def _reincarnate(self, messages: list[Message], incarnation: str) -> list[Message]:
        """The same messages naming a new ``incarnation`` (a consumer must not mix attempts; dead
        letters, which name none, stay as they are)."""
        return [self._encoders[m[0]].restamp(m, incarnation) if m[0] in self._encoders else m for m in messages]
