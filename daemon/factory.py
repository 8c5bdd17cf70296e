"""The one place that builds a worker's Kafka data path: source, sink, recovery and topic watch.

`kafka_worker` wires a `KafkaSource` and a `KafkaSink` (the source dead-letters through the
sink's writer, the sink commits the source's offsets for the consumer group), a `Recovery` when
there are checkpoints or a snapshot to load, and a `TopicWatch` over every topic the worker uses.
`worker_from_config` does the same from a validated ``ddflow.config.Config`` (what ``ddflow run``
and ``ddflow demo`` run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .input.progress import EpochPolicy
from .input.source import InputSpec, KafkaSource
from .kafka.topics import TopicWatch
from .observe.stats import Stats
from .output.sink import KafkaSink, OutputSpec
from .state.recovery import Recovery
from .worker import DataflowFactory, Worker

__all__ = ["kafka_worker", "worker_from_config"]


def kafka_worker(
    dataflow: DataflowFactory,
    inputs: Sequence[InputSpec],
    outputs: Sequence[OutputSpec],
    kafka_options: Mapping[str, Any],
    *,
    group_id: str = "ddflow",
    epochs: EpochPolicy | None = None,
    dead_letter_topic: str | None = None,
    transactional_id: str | None = None,
    transactions: str | bool = "auto",
    stats: Stats | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_interval: float = 60.0,
    checkpoint_keep: int = 3,
    checkpoint_shards: int = 4,
    snapshot_from: str | None = None,
    start_offsets: Mapping[tuple[str, int], int] | None = None,
    max_poll_messages: int = 10_000,
    max_epoch_updates: int | None = 100_000,
    poll_timeout: float = 0.05,
    dead_letter_commit_s: float = 5.0,
    consumer_options: Mapping[str, Any] | None = None,
    producer_options: Mapping[str, Any] | None = None,
    transaction_timeout: float = 60.0,
    commit_interval: float = 0.0,
    watch_interval: float | None = 5.0,
    worker: tuple[int, int] = (0, 1),
    wait_timeout: float = 60.0,
    mesh: tuple[tuple[str, ...], float] = ((), 10.0),
) -> Worker:
    """A `Worker` reading ``inputs`` and publishing ``outputs`` on the Kafka cluster of
    ``kafka_options``. ``group_id`` names the consumer group the input offsets are committed for
    (and the default ``transactional_id``); ``checkpoint_*`` configure `Recovery` (checkpoints in
    ``checkpoint_dir``; with one, an input offset the broker no longer holds is an error, not a
    skip); ``worker``: ``(i, W)``, worker i of W reads the input partitions ``p % W == i``, publishes
    as writer i of W with transactional id ``ddflow-{group_id}-{i}``, and exchanges and agrees with
    the others over the mesh, ``mesh = (addresses, peer_timeout)``: one address per worker
    (`cluster.mesh_member.MeshWorker`; ``wait_timeout``: seconds it waits for them at start);
    ``commit_interval``: seconds of epochs committed in one transaction while input keeps coming
    (0: one per epoch; an idle worker commits at once, `commits.CommitWindow`); ``watch_interval``
    None turns the topic watch off."""
    stats = stats or Stats()
    sink = KafkaSink(
        outputs, kafka_options,
        group_id=group_id,
        transactional_id=transactional_id or f"ddflow-{group_id}" + (f"-{worker[0]}" if worker[1] > 1 else ""),
        transactions=transactions,
        dead_letter_topic=dead_letter_topic,
        stats=stats,
        producer_options=producer_options,
        transaction_timeout=transaction_timeout,
        commit_interval=commit_interval,
        writer=worker,
        background=True,
    )
    source = KafkaSource(
        inputs, kafka_options,
        group_id=group_id,
        dead_letters=sink.dead_letters,
        stats=stats,
        consumer_options=consumer_options,
        strict_offsets=checkpoint_dir is not None,
        worker=worker,
    )
    recovery = (
        Recovery(list(inputs), kafka_options, directory=checkpoint_dir, snapshot_from=snapshot_from,
                 interval=checkpoint_interval, keep=checkpoint_keep, shards=checkpoint_shards, worker=worker)
        if checkpoint_dir is not None or snapshot_from is not None else None
    )
    watch = None
    if watch_interval is not None:
        roles = {i.topic: f"input {i.name!r}" for i in inputs}
        roles |= {o.topic: f"output {o.name!r}" for o in outputs}
        roles |= {o.progress_topic: f"progress topic of output {o.name!r}" for o in outputs
                  if o.progress_topic is not None}
        if sink.dead_letters is not None:
            roles[sink.dead_letters.topic] = "dead-letter"
        options, interval = dict(kafka_options), watch_interval

        def watch() -> TopicWatch:
            return TopicWatch(options, roles, interval=interval)

    common = dict(recovery=recovery, epochs=epochs, stats=stats, watch=watch, start_offsets=start_offsets,
                  max_poll_messages=max_poll_messages, max_epoch_updates=max_epoch_updates,
                  poll_timeout=poll_timeout, dead_letter_commit_s=dead_letter_commit_s)
    if worker[1] == 1:
        return Worker(dataflow, source, sink, **common)
    if len(mesh[0]) != worker[1]:
        raise ValueError(f"{worker[1]} workers need as many mesh addresses, not {len(mesh[0])}")
    from .cluster.mesh_member import MeshWorker

    return MeshWorker(dataflow, source, sink, index=worker[0], count=worker[1], run=group_id,
                      wait_timeout=wait_timeout, addresses=mesh[0], peer_timeout=mesh[1], **common)


def worker_from_config(config: Any, stats: Stats | None = None, *, snapshot_from: str | None = None) -> Worker:
    """The data path's worker for a validated ``Config``; ``snapshot_from``: a snapshot (e.g. a
    backfill) to load when there is no checkpoint yet (one worker of several loads the keys it owns)."""
    from ..config import build_dataflow, resolve_dataflow

    from .cluster.identity import mesh_addresses, worker_identity

    index, count = worker_identity(config)  # (the index ddflow run resolved, or the env's / host name's)
    resolve_dataflow(config)  # import errors become ConfigErrors on dataflow.function

    def build(df: Any, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        if config.dataflow.on_error != "stop" or config.dataflow.on_error_functions:
            from ..operators.nodes.calls import Quarantine

            df.context.quarantine = Quarantine(config.dataflow.on_error, config.dataflow.on_error_functions)
        return build_dataflow(config, df, inputs)

    inputs = [
        InputSpec(i.name, i.topic, {f.name: f.type for f in i.fields}, policy=i.progress, late=i.late,
                  idle_timeout=None if i.idle_timeout_ns is None else i.idle_timeout_ns / 1e9,
                  max_message_bytes=i.max_message_bytes, format=i.format, time_source=i.debezium_time)
        for i in config.inputs
    ]
    outputs = [
        OutputSpec(o.name, o.topic, format=o.format, fields={f.name: f.type for f in o.fields} or None,
                   key=o.key or None, progress_topic=o.progress_topic, schemas=o.schemas,
                   partitioner=o.partitioner, mode=o.mode, tombstones=o.tombstones,
                   source={"name": config.kafka.group_id, "db": config.dataflow.function})
        for o in config.outputs
    ]
    epochs = EpochPolicy(
        resolution_ns=config.epoch.resolution_ns,
        max_records=config.epoch.max_records,
        deadline_s=None if config.epoch.max_delay_ns is None else config.epoch.max_delay_ns / 1e9,
    )
    return kafka_worker(
        build, inputs, outputs, config.client_options(),
        group_id=config.kafka.group_id,
        epochs=epochs,
        max_epoch_updates=config.epoch.max_updates,
        dead_letter_topic=config.dead_letter_topic,
        checkpoint_dir=None if config.checkpoint.location is None else  # each worker its own checkpoints
        str(config.checkpoint.location / (f"worker-{index}" if count > 1 else "")),
        checkpoint_interval=config.checkpoint.interval_ns / 1e9,
        checkpoint_keep=config.checkpoint.keep,
        checkpoint_shards=config.checkpoint.shards,
        snapshot_from=snapshot_from,
        stats=stats,
        transaction_timeout=config.kafka.transaction_timeout_ns / 1e9,
        commit_interval=config.kafka.commit_interval_ns / 1e9,
        worker=(index, count),
        wait_timeout=config.workers.wait_timeout_ns / 1e9,
        mesh=(mesh_addresses(config), config.workers.peer_timeout_ns / 1e9),
    )
