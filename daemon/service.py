"""The daemon as a service: one config -> the worker, its Prometheus metrics, its HTTP endpoints.

``Service`` is what ``ddflow run`` and ``ddflow demo`` run. It translates the validated
``ddflow.config.Config`` into the data path's specs (inputs, outputs, epoch policy, client
options with secrets resolved) in one place, ``make_worker``; connects the worker's ``Stats`` to
``DaemonMetrics`` (counters read at scrape time, histograms fed per epoch); and answers the probes:
alive while the worker loop runs, ready once the inputs are assigned and the first epoch is
published. ``stop()`` may be called from any thread (a signal handler): the worker finishes the
epoch in progress, so everything below the last published frontier is final.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from ..config import Config, build_dataflow, resolve_dataflow
from .health import EndpointServer
from .metrics import DaemonMetrics, snapshot_from_stats
from .stats import Stats
from .wire import REASONS

__all__ = ["Service", "make_worker"]


class Service:
    """One daemon built from a ``Config``: the worker, its metrics, and the HTTP endpoints.

    ``run()`` blocks in the calling thread until ``stop()`` (any thread, e.g. a signal handler),
    ``timeout`` or a failure; ``stop()`` lets the worker finish the epoch in progress, so every
    time below the last published frontier is final on the result topics.
    """

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 snapshot_from: str | None = None) -> None:
        self.config = config
        self.snapshot_from = snapshot_from
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stats = Stats()
        self.metrics = DaemonMetrics(
            self.registry,
            inputs={i.name: i.late for i in config.inputs},
            outputs=[o.name for o in config.outputs],
            dead_letter_reasons=sorted(REASONS),
        )
        self.stats.on_epoch(self._on_epoch)
        self.worker: Any = None
        self.endpoints: Any = None
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._running = threading.Event()
        self._done = threading.Event()

    # -- probes and metrics ---------------------------------------------------------------------

    def _on_epoch(self, report: Any) -> None:
        latencies = [seconds for seconds, _ in report.latencies]
        counts = [count for _, count in report.latencies]
        self.metrics.observe_epoch(report.seconds, latencies, counts)

    def alive(self) -> tuple[bool, str]:
        if self.failure is not None:
            return False, f"worker failed: {type(self.failure).__name__}: {self.failure}"
        if self._done.is_set():
            return False, "worker stopped"
        return True, "worker running" if self._running.is_set() else "starting"

    def ready(self) -> tuple[bool, str]:
        if not self._running.is_set() or self.worker is None or self._done.is_set():
            return False, "worker not running"
        if not self.worker.assigned:
            return False, "input partitions not assigned yet"
        if self.stats.epochs < 1:
            return False, "first epoch not completed yet"
        return True, "ready"

    def snapshot(self) -> Any:
        return snapshot_from_stats(self.stats, topics={i.name: i.topic for i in self.config.inputs},
                                   ready=self.ready()[0])

    def arrangements(self) -> Any:
        worker = self.worker
        dataflow = None if worker is None else getattr(worker, "dataflow", None)
        return None if dataflow is None else dataflow.arrangement_stats()

    # -- lifecycle ------------------------------------------------------------------------------

    def serve(self) -> Any:
        """Start the HTTP endpoints on ``metrics.address``; returns the server (``.url``)."""
        self.metrics.bind(self.snapshot, self.arrangements)
        metrics = self.config.metrics
        self.endpoints = EndpointServer(self.registry, host=metrics.host, port=metrics.port,
                                        alive=self.alive, ready=self.ready, max_connections=metrics.max_connections,
                                        request_timeout=metrics.request_timeout_ns / 1e9)
        return self.endpoints

    def run(self, *, timeout: float | None = None) -> None:
        try:
            self.worker = make_worker(self.config, self.stats, snapshot_from=self.snapshot_from)
            if self._stop.is_set():
                return
            self._running.set()
            self.worker.run(timeout=timeout)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._done.set()

    def stop(self) -> None:
        self._stop.set()
        if self.worker is not None:
            self.worker.stop()

    def close(self) -> None:
        if self.endpoints is not None:
            self.endpoints.close()
            self.endpoints = None


def make_worker(config: Config, stats: Any, *, snapshot_from: str | None = None) -> Any:
    """The data path's worker for ``config`` (the one place that knows the worker's signature);
    ``snapshot_from``: a snapshot (e.g. a backfill) to load when there is no checkpoint yet."""
    from .progress import EpochPolicy
    from .sink import OutputSpec
    from .source import InputSpec
    from .worker import Worker

    resolve_dataflow(config)  # import errors become ConfigErrors on dataflow.function

    def build(df: Any, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        return build_dataflow(config, df, inputs)

    inputs = [
        InputSpec(i.name, i.topic, {f.name: f.type for f in i.fields}, policy=i.progress, late=i.late,
                  idle_timeout=None if i.idle_timeout_ns is None else i.idle_timeout_ns / 1e9,
                  max_message_bytes=i.max_message_bytes, format=i.format, time_source=i.debezium_time)
        for i in config.inputs
    ]
    outputs = [
        OutputSpec(o.name, o.topic, format=o.format, fields={f.name: f.type for f in o.fields} or None,
                   key=o.key or None, progress_topic=o.progress_topic, schemas=o.schemas)
        for o in config.outputs
    ]
    epoch = EpochPolicy(
        resolution_ns=config.epoch.resolution_ns,
        max_records=config.epoch.max_records,
        deadline_s=None if config.epoch.max_delay_ns is None else config.epoch.max_delay_ns / 1e9,
    )
    return Worker(
        build, inputs, outputs, config.client_options(),
        group_id=config.kafka.group_id,
        epoch=epoch,
        dead_letter_topic=config.dead_letter_topic,
        checkpoint_dir=None if config.checkpoint.location is None else str(config.checkpoint.location),
        checkpoint_interval=config.checkpoint.interval_ns / 1e9,
        checkpoint_keep=config.checkpoint.keep,
        checkpoint_shards=config.checkpoint.shards,
        snapshot_from=snapshot_from,
        stats=stats,
    )
