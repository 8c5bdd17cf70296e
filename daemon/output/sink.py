"""Kafka sinks: publish each epoch's output diffs with an idempotent, self-describing protocol.

For every completed epoch ``[lower, upper)`` and every output, the sink writes the epoch's
updates in msgpack batches (each naming ``lower``, ``upper`` and the sink's incarnation), then a
progress marker with the count of updates it wrote for that range on *every* partition of the
output topic (`ddflow.daemon.formats` has the formats; `results.ResultClient` is the consumer side); as writer ``i``
of ``W`` workers (``writer=(i, W)``) it publishes the records its worker holds, its markers name
it, and a consumer holds a range final once all ``W`` writers marked it. A record
always lands on the same partition (the stable hash of its key, its first field), so what any
incarnation writes for a time on a partition is the same set of updates: a consumer may take the
first complete epoch it sees for each range and drop the rest (re-sent epochs, duplicates,
aborted transactions that the broker shows anyway).

Outputs in the json and debezium formats (`formats`) write change events to the data topic
instead, partitioned by their key, and the progress markers to the output's companion progress
topic; the rules above are the same.

On open, the sink reads the output topics back and does not re-publish times that a partition
already marks final (a restarted daemon replays its inputs and recomputes them); an epoch that
reaches past a partition's final frontier is marked there from that frontier (``[final, upper)``,
the times it holds), so a reader that never saw the times below it finds an epoch missing rather
than accepting one that leaves them out. It reads from
the beginning, or from the positions a checkpoint recorded (`positions`: each partition's final
frontier, and per partition written or read the offset of the last message there, kept from the
delivery reports of what it writes), so a restart reads what was published since the checkpoint,
not the topics' whole history.

The sink owns the commit (it is an `io.Sink`): `publish` takes the epoch's output diffs and the
input offsets consumed so far into its commit window (`commits.CommitWindow`), and a commit makes
the window's epochs durable together once ``commit_interval`` has passed since its first epoch
(0: as soon as the commit before has landed), or at once when the worker has read all the input
there is (`maybe_commit` with ``idle``), committing the offsets for the consumer group
``group_id`` itself (through a consumer of its own that reads nothing). In a worker the commit
runs in a thread of its own while the next epochs compute, which go into the next window
(``background``, `commits.Committer`); its outcome is taken in the worker's thread. With a
``transactional_id``, the dead letters, outputs, markers and consumed input offsets of the
window's epochs commit in one Kafka transaction; without one, the producer is idempotent and the
input offsets are committed after a flush (`transactions`: the producer calls, retries and
timeouts). An epoch is final when its commit lands (``committed_upper``); a commit that fails
raises when the worker next publishes or commits, and nothing after it is committed either.
The outputs themselves are `outputs.OutputSpec`s.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ...operators.lattice import T_MIN
from ..block import Block
from ..deadletter import DeadLetterWriter
from ..exceptions import KafkaClientError, OptionsError
from ..formats.types import Message
from ..kafka.client import BOUNDED_GRACE, bounded, client_config, topic_partitions
from ..kafka.results import CLOSED, ProtocolStats, read_result_positions
from ..observe.stats import Stats
from .commits import CommitWindow, Committer, Window, WindowCommits
from .outputs import OutputSpec
from .transactions import TransactionalPublisher

__all__ = ["OutputSpec", "KafkaSink"]

log = logging.getLogger("ddflow.daemon.output.sink")

Staged = tuple[str, int | None, bytes | None, bytes, list[tuple[str, bytes]] | None]


class KafkaSink(WindowCommits, TransactionalPublisher):
    """Publishes epochs to the output topics (and dead letters) through one producer, committing
    the consumed input offsets with them (an `io.Sink`)."""

    def __init__(
        self,
        outputs: Sequence[OutputSpec],
        kafka_options: Mapping[str, Any],
        *,
        group_id: str | None = None,
        transactional_id: str | None = None,
        transactions: str | bool = "auto",
        dead_letter_topic: str | None = None,
        stats: Stats | None = None,
        producer_options: Mapping[str, Any] | None = None,
        resume: bool = True,
        max_attempts: int = 3,
        timeout: float = 30.0,
        transaction_timeout: float = 60.0,
        commit_interval: float = 0.0,
        writer: tuple[int, int] = (0, 1),
        background: bool = False,
    ) -> None:
        """``background``: commit in a thread of its own while the caller goes on (a worker
        computes its next epochs meanwhile; `factory.kafka_worker` sets it); the outcome is taken
        at the next `publish`, `maybe_commit` or `commit`. Without it, a commit that is due runs
        in `publish` (with ``commit_interval`` 0, every epoch is committed when `publish` returns)."""
        if not outputs:
            raise OptionsError("KafkaSink: no outputs given")
        if type(writer[1]) is not int or writer[1] < 1 or type(writer[0]) is not int or not 0 <= writer[0] < writer[1]:
            raise OptionsError(f"KafkaSink writer: expected (index, count) with 0 <= index < count, got {writer!r}")
        self.writer = writer  # (i, W): this sink is writer i of the W that mark every result partition
        topics = [o.topic for o in outputs]
        names = [o.name for o in outputs]
        for label, values in (("name", names), ("topic", topics)):
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise OptionsError(f"KafkaSink: outputs share the {label} {dupes[0]!r}; each output needs its own")
        if transactions not in ("auto", True, False):
            raise OptionsError(f"KafkaSink transactions: expected 'auto', True or False, got {transactions!r}")
        if transactions is True and not transactional_id:
            raise OptionsError("KafkaSink: transactions=True needs a transactional_id")
        if not isinstance(transaction_timeout, (int, float)) or not transaction_timeout >= 1:
            raise OptionsError(f"KafkaSink transaction_timeout: expected seconds >= 1, got {transaction_timeout!r}")
        self.outputs = list(outputs)
        self.stats = stats or Stats()
        for o in outputs:
            self.stats.output(o.name)
        self._kafka_options = dict(kafka_options)
        self._producer_options = dict(producer_options or {})
        self._transactional_id = transactional_id if transactions is not False else None
        self._transactions_required = transactions is True
        self.resume = resume
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.transaction_timeout = float(transaction_timeout)
        self.incarnation = uuid.uuid4().hex[:16]
        self.transactional = False
        self._producer: Producer | None = None
        self.group_id = group_id
        self._committer: Consumer | None = None  # commits the input offsets for group_id, reads nothing
        self._partitions: dict[str, int] = {}
        self._encoders = {t: o.encoder for o in outputs for t in (o.topic, o.progress_topic) if t is not None}
        self.final: dict[str, list[int]] = {}  # output topic -> per-partition final frontier
        self._last: dict[tuple[str, int], int] = {}  # the offset of the last message read or written, per partition
        self._window = CommitWindow(commit_interval)  # epochs published, not handed to the committer yet
        self._commits = Committer("ddflow-commit", background=background)  # commits a window (in the background)
        self._inflight: Window | None = None  # the window being committed
        self._marked: set[tuple[str, int]] = set()  # the output partitions the window marks final
        self.committed_upper: int | None = T_MIN  # the upper of the last epoch committed (None: closed for good)
        self.resume_stats = ProtocolStats()  # what open() read of the output topics
        self._staged: list[Staged] = []
        self._staged_since: float | None = None
        self.dead_letters = (
            DeadLetterWriter(dead_letter_topic, self._stage_dead_letter, stats=self.stats, worker=writer[0],
                             name=group_id) if dead_letter_topic else None
        )

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self, resume: Mapping[str, Any] | None = None, *, stop: Callable[[], bool] | None = None) -> None:
        """Open the producer and learn which times the output topics already hold as final:
        read from the beginning, or from the ``resume`` positions a checkpoint recorded (see
        `positions`; `RecoveryError` if a topic no longer holds them). ``stop``: a stop request
        that ends that read with `Stopped` (nothing is published yet)."""
        for o in self.outputs:
            self._partitions[o.topic] = topic_partitions(self._kafka_options, o.topic)
            if o.progress_topic is not None:
                topic_partitions(self._kafka_options, o.progress_topic)  # it exists
        if self.dead_letters is not None:
            topic_partitions(self._kafka_options, self.dead_letters.topic)
        base = {"linger.ms": 5, **self._kafka_options, **self._producer_options}
        if self._transactional_id:
            role = {"transactional.id": self._transactional_id, "enable.idempotence": True,
                    "transaction.timeout.ms": int(self.transaction_timeout * 1000)}
            producer = Producer(client_config(base, role, who="output producer"))
            try:
                self._bounded(lambda: producer.init_transactions(self.transaction_timeout), "init_transactions",
                              "initialising transactions")
                self._producer, self.transactional = producer, True
            except KafkaException as exc:
                if self._transactions_required:
                    raise KafkaClientError(
                        f"initialising transactions with transactional.id {self._transactional_id!r}: {exc}"
                    ) from exc
                log.warning("the broker refused transactions (%s); publishing without them", exc)
        if self._producer is None:
            self._producer = Producer(client_config(base, {"enable.idempotence": True}, who="output producer"))
        if self.resume:
            formats = {o.topic: (o.format, o.progress_topic, o.mode) for o in self.outputs
                       if o.progress_topic is not None}
            try:
                self.final, self._last = read_result_positions(
                    [o.topic for o in self.outputs], self._kafka_options, timeout=self.timeout, formats=formats,
                    finals=(resume or {}).get("finals"), starts=(resume or {}).get("starts"),
                    stats=self.resume_stats, writer=self.writer[0], stop=stop,
                )
            except BaseException:  # stopped or refused: nothing is published, the producer goes
                producer, self._producer = self._producer, None
                producer.flush(0)
                raise
        else:
            self.final = {o.topic: [T_MIN] * self._partitions[o.topic] for o in self.outputs}
        if self.dead_letters is not None:  # the failures of committed epochs have their dead letters
            self.dead_letters.functions_final(min(min(finals, default=T_MIN) for finals in self.final.values()))
        log.info(
            "outputs open (incarnation %s, %s): %s", self.incarnation,
            "transactional" if self.transactional else "idempotent",
            ", ".join(f"{o.name}->{o.topic} final from {min(self.final[o.topic])}" for o in self.outputs),
        )
        self.start_fence_checks()

    def close(self) -> None:
        self.stop_fence_checks()
        if self._commits.busy:  # the worker failed while a commit was in flight: it lands or fails now
            try:
                self._commits.result(timeout=2 * self.transaction_timeout + 4 * BOUNDED_GRACE)
                log.info("the commit in flight when the sink closed landed")
            except Exception as exc:
                log.warning("the commit in flight when the sink closed failed: %s: %s", type(exc).__name__, exc)
        committer, self._committer = self._committer, None
        if committer is not None:
            try:
                bounded(committer.close, 10.0, "closing the offset committer")
            except KafkaClientError as exc:
                log.warning("%s", exc)
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                self._bounded(lambda: producer.flush(self.transaction_timeout), "flush", "closing the output producer")
            except KafkaClientError as exc:
                log.warning("%s", exc)

    def positions(self) -> dict[str, Any]:
        """Where a restart may resume (`open`'s ``resume``): ``finals``, per output topic the final
        frontier of each partition, and ``starts``, per (topic, partition) read or written the
        offset of the last message there (everything after it came later)."""
        starts = {key: offset for key, offset in self._last.items() if key[0] in self._encoders}  # not dead letters
        return {"finals": {topic: list(finals) for topic, finals in self.final.items()}, "starts": starts}
    # -- dead letters ------------------------------------------------------------------------------

    def _stage_dead_letter(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        if self._staged_since is None:
            self._staged_since = time.monotonic()
        self._staged.append((topic, None, key, value, headers))

    def staged_for(self) -> float:
        """Seconds since the oldest dead letter waiting for the next commit (0 if none)."""
        return 0.0 if self._staged_since is None else time.monotonic() - self._staged_since

    # -- publishing --------------------------------------------------------------------------------

    def publish(
        self,
        lower: int,
        upper: int | None,
        updates: Mapping[str, Block | Sequence[tuple[Any, int, int]]],
        *,
        offsets: Mapping[tuple[str, int], int] | None = None,
        snapshot: bool = False,
    ) -> dict[str, int]:
        """Publish epoch ``[lower, upper)`` (upper None: final forever), the updates of each output
        as a `block.Block` or ``(record, time, diff)`` tuples, in the commit window, to be
        committed together with the window's other epochs, the staged dead letters and the input
        ``offsets`` ((topic, partition) -> next offset to read, committed for ``group_id``; ignored
        without one) once ``commit_interval`` has passed since the window's first epoch (at once
        with an interval of 0) and the commit before it landed (in the background with
        ``background``). ``snapshot``: the epoch publishes a snapshot's contents (see
        `formats.types.Encoder.epoch`). Returns the updates written per output."""
        messages, written, marked = self._encode(lower, upper, updates, snapshot=snapshot)
        self._window.add(lower, upper, messages, offsets)
        self._marked.update(marked)
        self.maybe_commit()
        return written

    def pending(self) -> int:
        """Epochs published and not committed yet (in the window or in the commit in flight)."""
        return self._window.epochs + (self._inflight.epochs if self._inflight is not None else 0)

    def commit_dead_letters(self) -> None:
        """Commit staged dead letters (with the window's epochs, if any) when no commit came for a while."""
        if self._staged:
            self.commit()

    def _start(self) -> None:
        """Hand the window and the staged dead letters to the committer."""
        window = self._window.take()
        window.extra["staged"], self._staged, self._staged_since = self._staged, [], None
        window.extra["marked"], self._marked = self._marked, set()
        positions = None
        if window.offsets and self.group_id is not None:
            positions = [TopicPartition(t, p, o) for (t, p), o in sorted(window.offsets.items()) if o >= 0]
        consumer = self._offset_committer() if positions else None
        self._inflight = window
        self._commits.start(lambda: self._commit(window, positions, consumer))

    def _collect(self) -> bool:
        """Wait for the commit in flight; once it landed its epochs are final (raises its failure)."""
        window, delivered, incarnation = self._commits.result()
        self._inflight = None
        self._last.update(delivered)
        self.incarnation = incarnation
        if window.epochs:
            final = CLOSED if window.upper is None else window.upper
            for topic, partition in window.extra["marked"]:
                self.final[topic][partition] = max(self.final[topic][partition], final)
            self.committed_upper = window.upper
            now = time.time()
            for o in self.outputs:
                ostats = self.stats.output(o.name)
                ostats.frontier = window.upper
                ostats.last_epoch_time = now
        return True

    def _encode(
        self, lower: int, upper: int | None, updates: Mapping[str, Block | Sequence[tuple[Any, int, int]]], *,
        snapshot: bool = False,
    ) -> tuple[list[Message], dict[str, int], list[tuple[str, int]]]:
        unknown = set(updates) - {o.name for o in self.outputs}
        if unknown:
            raise OptionsError(f"publishing epoch [{lower}, {upper}): unknown outputs {sorted(unknown)}")
        messages: list[Message] = []
        written: dict[str, int] = {}
        marked: list[tuple[str, int]] = []
        writer = self.writer if self.writer[1] > 1 else None
        for o in self.outputs:
            partitions = self._partitions[o.topic]
            final = self.final[o.topic]
            ostats = self.stats.output(o.name)
            block = Block.of(updates.get(o.name, ()))
            if partitions == 1:
                by_partition = [block]
            else:  # each partition's updates, in their order
                where = o.encoder.partitions(block, partitions)
                block = block.take(np.argsort(where, kind="stable"))
                ends = np.cumsum(np.bincount(where, minlength=partitions)).tolist()
                by_partition = [block.slice(start, end) for start, end in zip([0] + ends[:-1], ends, strict=True)]
            suppressed = 0
            count = 0
            for p, entries in enumerate(by_partition):
                if upper is not None and upper <= final[p]:
                    suppressed += len(entries)  # the whole range is already final on this partition
                    continue
                start = lower
                if final[p] > lower:  # partly final (a restart): publish only the times beyond it, and
                    start = final[p]  # say so: the epoch this partition gets is [final, upper)
                    kept = entries.take(entries.times >= start)
                    suppressed += len(entries) - len(kept)
                    entries = kept
                data, marker = o.encoder.epoch_block(start, upper, self.incarnation, p, entries, writer,
                                                     snapshot=snapshot)
                messages.extend(data)
                messages.append(marker)
                marked.append((o.topic, p))
                ostats.messages += len(data)
                ostats.progress_markers += 1
                count += len(entries)
            ostats.updates += count
            ostats.suppressed_updates += suppressed
            written[o.name] = count
        return messages, written, marked
