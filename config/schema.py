"""The configuration schema: typed, frozen sections of one daemon's config file.

A config describes one worker: the dataflow to run (``module:function``), the Kafka connection,
the input topics (record fields, progress policy, late policy, idle timeout), the output topics,
how progress is batched into epochs, the dead-letter topic, the checkpoint location and the
metrics address. Durations are strings with a unit (``"1ms"``, ``"250us"``, ``"5s"``) and are kept
as integer nanoseconds, the unit of data times.

The classes here are plain data; ``ddflow.config.loader`` builds them from TOML and reports
every problem with its key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, Problem
from .secrets import SecretRef, mask

__all__ = [
    "FORMATS",
    "DEBEZIUM_TIMES",
    "PROGRESS_POLICIES",
    "LATE_POLICIES",
    "FIELD_TYPES",
    "Field",
    "DataflowConfig",
    "KafkaConfig",
    "InputConfig",
    "OutputConfig",
    "EpochConfig",
    "CheckpointConfig",
    "MetricsConfig",
    "WorkerConfig",
    "WorkersConfig",
    "Config",
]

FORMATS = ("msgpack", "json", "debezium")
DEBEZIUM_TIMES = ("envelope", "source")
PROGRESS_POLICIES = ("explicit", "monotonic", "reclock")
LATE_POLICIES = ("advance", "reject")
FIELD_TYPES = ("any", "int", "float", "str", "bytes", "bool")
PARTITIONERS = ("ddflow", "murmur2")  # the stable key hash, or Kafka's default partitioner
OUTPUT_MODES = ("changelog", "upsert")  # json outputs: updates, or the row per key


@dataclass(frozen=True)
class Field:
    """One field of an input record: a name and the type its wire value must have."""

    name: str
    type: str = "any"


@dataclass(frozen=True)
class DataflowConfig:
    """The dataflow: ``function(df, inputs, **args) -> outputs`` found at ``module:function``.

    ``path`` lists directories (absolute, resolved against the config file) put on ``sys.path``
    before importing, so a user's module can live next to its config.
    """

    function: str
    args: Mapping[str, Any] = field(default_factory=dict)
    path: tuple[Path, ...] = ()
    on_error: str = "stop"  # a user function's exception: "stop" the daemon, or "dead_letter" its record
    on_error_functions: Mapping[str, str] = field(default_factory=dict)  # per function (qualified name)


@dataclass(frozen=True)
class KafkaConfig:
    """Kafka connection: bootstrap, pass-through client options, secret references, how long
    the output producer's blocking calls (a transaction's commit among them) may take (a broker
    that stalls for less is ridden out, a longer stall fails the epoch), and the commit interval:
    the epochs closed within it are committed in one transaction (0: one per epoch).
    ``connect_timeout_ns``: how long the daemon waits at start for the broker to answer (probing
    with backoff, ``/readyz`` failing meanwhile) before it exits 1 saying the broker is unreachable."""

    bootstrap: str | None = None
    group_id: str = "ddflow"
    options: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, SecretRef] = field(default_factory=dict)
    transaction_timeout_ns: int = 60_000_000_000
    commit_interval_ns: int = 50_000_000
    connect_timeout_ns: int = 120_000_000_000

    def with_bootstrap(self, bootstrap: str) -> KafkaConfig:
        return KafkaConfig(bootstrap, self.group_id, self.options, self.secrets, self.transaction_timeout_ns,
                           self.commit_interval_ns, self.connect_timeout_ns)

    def client_options(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """librdkafka options with secrets resolved (plain values: hand to a client, never log).

        Raises ``LookupError`` naming the variable or file of a secret that cannot be read.
        """
        options: dict[str, Any] = {}
        if self.bootstrap is not None:
            options["bootstrap.servers"] = self.bootstrap
        options.update(self.options)
        for name, ref in self.secrets.items():
            options[name] = ref.resolve(environ).reveal()
        return options

    def redacted(self) -> dict[str, Any]:
        """What may be logged: option values (secret names masked, whatever their case), secret
        *references*, never secret values."""
        return {
            "bootstrap": self.bootstrap,
            "group_id": self.group_id,
            "transaction_timeout_ns": self.transaction_timeout_ns,
            "commit_interval_ns": self.commit_interval_ns,
            "connect_timeout_ns": self.connect_timeout_ns,
            "options": mask(dict(self.options)),
            "secrets": {name: ref.describe() for name, ref in self.secrets.items()},
        }


@dataclass(frozen=True)
class InputConfig:
    """One input collection fed from a topic.

    ``progress``: ``explicit`` (progress markers), ``monotonic`` (times non-decreasing per
    partition; a partition idle for ``idle_timeout_ns`` at its end stops holding the frontier),
    ``reclock`` (the daemon assigns arrival time). ``late``: ``advance`` an update behind its
    partition's frontier to that frontier (counted) or ``reject`` it to the dead-letter topic.
    ``format``: how messages are written (``msgpack``, ``json``, ``debezium``);
    ``debezium_time``: a Debezium event's time is the ``envelope``'s ``ts_*`` or its ``source``'s.
    ``partitioner`` (json, debezium): how ``ddflow produce`` places the input's messages by key:
    ``ddflow`` (the stable key hash) or ``murmur2`` (Kafka's default partitioner, as any other
    producer of the topic would).
    """

    name: str
    topic: str
    fields: tuple[Field, ...]
    progress: str = "explicit"
    late: str = "advance"
    idle_timeout_ns: int | None = None
    max_message_bytes: int = 1 << 20
    format: str = "msgpack"
    debezium_time: str = "envelope"
    partitioner: str = "ddflow"


@dataclass(frozen=True)
class OutputConfig:
    """One output collection published to a topic in ``format`` (``msgpack``, ``json``,
    ``debezium``). The json and debezium formats write one change event per message: ``fields``
    names the record's fields (required by debezium), ``key`` the fields of the message key
    (default: the first field), ``progress_topic`` the companion topic of the progress markers
    (required), ``schemas`` wraps events in Kafka Connect's ``{"schema", "payload"}``,
    ``partitioner`` places them (``ddflow``: the stable key hash; ``murmur2``: Kafka's default
    partitioner over the message key); ``mode`` (json): ``changelog`` (updates) or ``upsert`` (the
    row per key, a tombstone when it leaves); ``tombstones`` (debezium): a tombstone after each
    delete event."""

    name: str
    topic: str
    format: str = "msgpack"
    fields: tuple[Field, ...] = ()
    key: tuple[str, ...] = ()
    progress_topic: str | None = None
    schemas: bool = False
    partitioner: str = "ddflow"
    mode: str = "changelog"
    tombstones: bool = True


@dataclass(frozen=True)
class EpochConfig:
    """How progress is batched: fixed ``resolution_ns`` windows of data time, or variable epochs
    closed after ``max_records`` records or ``max_delay_ns`` of wall time (whichever first).
    Whatever the mode, at most ``max_updates`` input updates are fed that no closed epoch holds
    yet (a backlog is caught up in epochs of that size, in bounded memory)."""

    resolution_ns: int | None = 1_000_000
    max_records: int | None = None
    max_delay_ns: int | None = None
    max_updates: int = 100_000

    @property
    def mode(self) -> str:
        return "fixed" if self.resolution_ns is not None else "variable"


@dataclass(frozen=True)
class CheckpointConfig:
    """Where snapshots are written (``None``: no checkpoints, state is rebuilt by replay), how
    often (wall time, at an epoch boundary), how many are kept, and into how many key shards."""

    location: Path | None = None
    interval_ns: int = 60_000_000_000
    keep: int = 3
    shards: int = 4


@dataclass(frozen=True)
class MetricsConfig:
    """The HTTP address serving ``/metrics``, ``/healthz`` and ``/readyz`` (port 0: any free port),
    how many ``/metrics`` requests it serves at once (more are answered 503) and half-sent requests
    it holds (probes are answered regardless), and how long one connection may last from accept to
    the end of its response."""

    host: str = "127.0.0.1"
    port: int = 9464
    max_connections: int = 16
    request_timeout_ns: int = 10_000_000_000

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class WorkerConfig:
    """How the worker loop is supervised: ``/healthz`` fails once the loop has made no progress
    for ``stall_timeout_ns`` (a step, or a phase of an epoch); after SIGTERM the daemon waits
    ``stop_timeout_ns`` for the epoch in progress, then exits 1 without it (keep it below the
    supervisor's stop timeout, e.g. systemd's ``TimeoutStopSec``). ``frontier_stall_timeout_ns``: how
    long the output frontier may stay put while input updates wait before the stall is logged with
    the partition holding it back and ``/readyz`` fails (`ddflow.daemon.input.stalls`)."""

    stall_timeout_ns: int = 300_000_000_000
    stop_timeout_ns: int = 75_000_000_000
    frontier_stall_timeout_ns: int = 30_000_000_000


@dataclass(frozen=True)
class WorkersConfig:
    """Scale-out: ``count`` worker processes share one dataflow, each owning the keys whose stable
    hash modulo ``count`` is its ``index``. ``index`` is ``None`` when the file does not give it: the
    daemon resolves it at start (``ddflow run --worker-index``, env ``DDFLOW_WORKER_INDEX``, or the
    host name's trailing ``-N``, e.g. a StatefulSet pod ``ddflow-3``; see ``ddflow.daemon.cluster.identity``).
    When given, ``0 <= index < count``. ``wait_timeout_ns``: how long a worker waits for the others
    at the mesh's start-up barrier before it exits 1 (a worker restarting takes a while).
    ``addresses``: one per worker (``tcp://HOST:PORT`` or ``ipc://PATH``), where each listens on the
    mesh, the direct connections the workers exchange over (``ddflow.daemon.cluster.mesh``); empty:
    sockets of this host (``ddflow.daemon.cluster.identity.mesh_addresses``). ``peer_timeout_ns``:
    how long a worker hears nothing from a peer before it reports it lost."""

    count: int = 1
    index: int | None = None
    wait_timeout_ns: int = 60_000_000_000
    addresses: tuple[str, ...] = ()
    peer_timeout_ns: int = 10_000_000_000


@dataclass(frozen=True)
class Config:
    """One daemon's whole configuration, as loaded from ``source``."""

    source: Path
    dataflow: DataflowConfig
    kafka: KafkaConfig
    inputs: tuple[InputConfig, ...]
    outputs: tuple[OutputConfig, ...]
    epoch: EpochConfig = EpochConfig()
    dead_letter_topic: str = "ddflow-dead-letters"
    checkpoint: CheckpointConfig = CheckpointConfig()
    metrics: MetricsConfig = MetricsConfig()
    worker: WorkerConfig = WorkerConfig()
    workers: WorkersConfig = WorkersConfig()

    def input(self, name: str) -> InputConfig:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def client_options(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """librdkafka options with secrets read from their env variables/files (never log these).

        Raises ``ConfigError`` naming ``kafka.secrets."OPTION"`` for every secret that cannot be read.
        """
        problems = []
        for name, ref in self.kafka.secrets.items():
            try:
                ref.resolve(environ)
            except LookupError as exc:
                problems.append(Problem(f'kafka.secrets."{name}"', str(exc.args[0])))
        if problems:
            raise ConfigError(self.source, problems)
        return self.kafka.client_options(environ)

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as a plain dict that is safe to log: no secret values, and
        the values of secret-looking names masked wherever they are (``kafka.options``,
        ``dataflow.args``)."""
        return {
            "source": str(self.source),
            "dataflow": {
                "function": self.dataflow.function,
                "args": mask(dict(self.dataflow.args)),
                "path": [str(p) for p in self.dataflow.path],
            },
            "kafka": self.kafka.redacted(),
            "inputs": [
                {
                    "name": i.name,
                    "topic": i.topic,
                    "fields": {f.name: f.type for f in i.fields},
                    "progress": i.progress,
                    "late": i.late,
                    "idle_timeout_ns": i.idle_timeout_ns,
                    "max_message_bytes": i.max_message_bytes,
                    "format": i.format,
                    **({"debezium_time": i.debezium_time} if i.format == "debezium" else {}),
                    **({"partitioner": i.partitioner} if i.format != "msgpack" else {}),
                }
                for i in self.inputs
            ],
            "outputs": [
                {"name": o.name, "topic": o.topic, "format": o.format}
                | ({"fields": {f.name: f.type for f in o.fields}, "key": list(o.key),
                    "progress_topic": o.progress_topic, "schemas": o.schemas, "partitioner": o.partitioner}
                   if o.format != "msgpack" else {})
                | ({"mode": o.mode} if o.format == "json" else {})
                | ({"tombstones": o.tombstones} if o.format == "debezium" else {})
                for o in self.outputs
            ],
            "epoch": {
                "resolution_ns": self.epoch.resolution_ns,
                "max_records": self.epoch.max_records,
                "max_delay_ns": self.epoch.max_delay_ns,
                "max_updates": self.epoch.max_updates,
            },
            "dead_letter_topic": self.dead_letter_topic,
            "checkpoint": {
                "location": None if self.checkpoint.location is None else str(self.checkpoint.location),
                "interval_ns": self.checkpoint.interval_ns,
                "keep": self.checkpoint.keep,
                "shards": self.checkpoint.shards,
            },
            "metrics": {
                "address": self.metrics.address,
                "max_connections": self.metrics.max_connections,
                "request_timeout_ns": self.metrics.request_timeout_ns,
            },
            "worker": {
                "stall_timeout_ns": self.worker.stall_timeout_ns,
                "stop_timeout_ns": self.worker.stop_timeout_ns,
                "frontier_stall_timeout_ns": self.worker.frontier_stall_timeout_ns,
            },
            "workers": {"count": self.workers.count, "index": self.workers.index,
                        "wait_timeout_ns": self.workers.wait_timeout_ns, "addresses": list(self.workers.addresses),
                        "peer_timeout_ns": self.workers.peer_timeout_ns},
        }
