"""Prometheus metrics of one daemon, exported under fixed names (the metrics table of docs/operations.md lists them).

The worker keeps plain cumulative numbers (a ``MetricsSnapshot``: updates in and out, epochs,
frontiers, lag, late and dead-lettered updates); a collector turns them into metric families at
scrape time, so the hot path never touches a Prometheus object and every known series exists
(at 0) from the first scrape. Arrangement sizes and compaction work are costly to keep live and
are also computed at scrape time, from ``Dataflow.arrangement_stats()``, and so are the operators'
remembered results (``Dataflow.operator_stats()``); both are labelled with the names the dataflow
gave (``Collection.name``) or the operator's kind and user function (``map(parse_view)``). The two histograms (epoch
processing time, end-to-end latency) are the only live state: the worker reports each epoch to
``DaemonMetrics.observe_epoch``, which buckets a whole epoch's latencies with one numpy search.

Everything is registered in a registry passed in, never the global one, so tests and several
daemons in one process do not collide. Every ddflow series carries a ``worker`` label: the index of
the worker (of ``workers``) that exports it, ``"0"`` when one worker runs the dataflow alone.
"""

from __future__ import annotations

import logging
import platform
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "EPOCH_BUCKETS",
    "LATENCY_BUCKETS",
    "METRIC_NAMES",
    "BulkHistogram",
    "DaemonMetrics",
    "MetricsSnapshot",
    "snapshot_from_stats",
    "ArrangementCollector",
    "OperatorCollector",
    "WorkerLabel",
]

from .liveness import BrokerCollector
from .metrics_engine import ArrangementCollector, OperatorCollector
from .snapshot import MetricsSnapshot, snapshot_from_stats

log = logging.getLogger(__name__)

# seconds: a 1 ms epoch of single-element updates takes ~1e-4 s; a large backfill epoch seconds
EPOCH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

METRIC_NAMES = (
    "ddflow_build_info",
    "ddflow_input_updates_total",
    "ddflow_output_updates_total",
    "ddflow_epochs_total",
    "ddflow_epoch_processing_seconds",
    "ddflow_end_to_end_latency_seconds",
    "ddflow_input_frontier_timestamp_seconds",
    "ddflow_input_partition_frontier_timestamp_seconds",
    "ddflow_output_frontier_timestamp_seconds",
    "ddflow_last_epoch_timestamp_seconds",
    "ddflow_worker_loop_timestamp_seconds",
    "ddflow_consumer_lag_messages",
    "ddflow_arrangement_records",
    "ddflow_arrangement_batches",
    "ddflow_arrangement_bytes",
    "ddflow_compaction_merge_records_total",
    "ddflow_operator_memo_records",
    "ddflow_operator_memo_bytes",
    "ddflow_late_updates_total",
    "ddflow_dead_letters_total",
    "ddflow_input_tombstones_total",
    "ddflow_ready",
    "ddflow_broker_answering",
    "ddflow_broker_last_answer_timestamp_seconds",
    "ddflow_exchange_wait_seconds_total",
    "ddflow_exchange_waiting",
    "ddflow_mesh_peer_lost",
    "ddflow_kernels_interpreted",
)


def _version() -> str:
    try:
        return metadata.version("ddflow")
    except metadata.PackageNotFoundError:
        return "unknown"


_LEAST_TIME = -(1 << 63)  # the least time: a frontier there has seen no progress yet


def _seconds(ns: float | None) -> float:
    """A frontier in seconds; 0 before any progress (not known, or still the least time: a gauge at
    -9.2e9 s would read as a date three centuries back)."""
    return 0.0 if ns is None or ns <= _LEAST_TIME else ns / 1e9


class _SnapshotCollector(Collector):
    """Families from a ``MetricsSnapshot`` taken at scrape time, with every known series present."""

    def __init__(self, owner: DaemonMetrics) -> None:
        self.owner = owner

    def describe(self) -> Iterable[Metric]:
        return self._families(MetricsSnapshot())

    def collect(self) -> Iterable[Metric]:
        for attempt in range(3):  # the worker thread may resize a dict mid-read: try again
            try:
                return self._families(self.owner.snapshot())
            except RuntimeError:
                if attempt == 2:
                    log.warning("metrics snapshot kept changing during the scrape", exc_info=True)
            except Exception:  # a scrape must not take the endpoint down; the known series stay visible
                log.exception("metrics snapshot failed; exporting known series at their defaults")
                break
        return self._families(MetricsSnapshot())

    def _families(self, s: MetricsSnapshot) -> list[Metric]:
        o = self.owner
        build = GaugeMetricFamily("ddflow_build_info", "Build metadata (always 1).", labels=["version", "python"])
        build.add_metric([o.version, platform.python_version()], 1)

        updates_in = CounterMetricFamily("ddflow_input_updates", "Updates consumed and accepted per input.",
                                         labels=["input"])
        frontier_in = GaugeMetricFamily("ddflow_input_frontier_timestamp_seconds",
                                        "Input frontier (data time, ns / 1e9).", labels=["input"])
        for name in _known(o.inputs, s.input_updates, s.input_frontier_ns):
            updates_in.add_metric([name], s.input_updates.get(name, 0))
            frontier_in.add_metric([name], _seconds(s.input_frontier_ns.get(name)))

        frontier_part = GaugeMetricFamily("ddflow_input_partition_frontier_timestamp_seconds",
                                          "Frontier of one assigned input partition: the time its progress "
                                          "markers promise (ns / 1e9; 0 before the first).",
                                          labels=["input", "partition"])
        for (name, partition), ns in sorted(s.partition_frontier_ns.items()):
            frontier_part.add_metric([name, str(partition)], _seconds(ns))

        updates_out = CounterMetricFamily("ddflow_output_updates", "Output diffs published per output.",
                                          labels=["output"])
        frontier_out = GaugeMetricFamily("ddflow_output_frontier_timestamp_seconds",
                                         "Output frontier: upper of the last published epoch (ns / 1e9).",
                                         labels=["output"])
        for name in _known(o.outputs, s.output_updates, s.output_frontier_ns):
            updates_out.add_metric([name], s.output_updates.get(name, 0))
            frontier_out.add_metric([name], _seconds(s.output_frontier_ns.get(name)))

        epochs = CounterMetricFamily("ddflow_epochs", "Epochs completed.", value=s.epochs)
        last_epoch = GaugeMetricFamily("ddflow_last_epoch_timestamp_seconds",
                                       "Wall-clock unix time when the last epoch completed.",
                                       value=s.last_epoch_wall or 0.0)

        lag = GaugeMetricFamily("ddflow_consumer_lag_messages",
                                "High watermark minus position per assigned partition (informational).",
                                labels=["topic", "partition"])
        for (topic, partition), value in sorted(s.consumer_lag.items()):
            lag.add_metric([topic, str(partition)], value)

        late = CounterMetricFamily("ddflow_late_updates",
                                   "Updates behind their partition's frontier, by input and late policy.",
                                   labels=["input", "policy"])
        late_series = {(name, policy): 0 for name, policy in o.inputs.items()}
        late_series.update(s.late_updates)
        for (name, policy), value in sorted(late_series.items()):
            late.add_metric([name, policy], value)

        dead = CounterMetricFamily("ddflow_dead_letters",
                                   "Bad updates (or whole messages) dead-lettered, by input and reason.",
                                   labels=["input", "reason"])
        dead_series = {(name, reason): 0 for name in o.inputs for reason in o.dead_letter_reasons}
        dead_series.update(s.dead_letters)
        for (name, reason), value in sorted(dead_series.items()):
            dead.add_metric([name, reason], value)

        tombstones = CounterMetricFamily("ddflow_input_tombstones",
                                         "Null values (Debezium tombstones) skipped, by input.", labels=["input"])
        for name in _known(o.inputs, s.tombstones):
            tombstones.add_metric([name], s.tombstones.get(name, 0))

        ready = GaugeMetricFamily("ddflow_ready", "1 once assigned and past the first epoch.", value=int(s.ready))
        loop = GaugeMetricFamily("ddflow_worker_loop_timestamp_seconds",
                                 "Unix time when the worker loop last stepped (0: not running yet); it stops "
                                 "advancing when the loop is blocked", value=s.loop_wall or 0.0)
        peers = sorted(set(range(o.workers)) - {o.worker} | set(s.exchange_waited) | set(s.exchange_waiting_on))
        waited = CounterMetricFamily("ddflow_exchange_wait_seconds",
                                     "Seconds this worker spent blocked in exchange steps and agreements while "
                                     "the peer worker had not delivered its part.", labels=["peer"])
        waiting = GaugeMetricFamily("ddflow_exchange_waiting",
                                    "1 while this worker is blocked on the peer worker.", labels=["peer"])
        for peer in peers:
            waited.add_metric([str(peer)], s.exchange_waited.get(peer, 0.0))
            waiting.add_metric([str(peer)], int(peer in s.exchange_waiting_on))
        lost = GaugeMetricFamily("ddflow_mesh_peer_lost",
                                 "1 once this worker found the peer worker lost over the mesh (silent for "
                                 "workers.peer_timeout, or restarted): every worker then exits and restarts.",
                                 labels=["peer", "address"])
        for peer, address in sorted(s.mesh_peers.items()):
            lost.add_metric([str(peer), address], int(peer in s.mesh_lost))
        interpreted = GaugeMetricFamily("ddflow_kernels_interpreted",
                                        "Kernels the engine runs as Python until they are compiled (a first run on "
                                        "a cold kernel cache; 0 once compiled, and on a warm start).",
                                        value=_interpreted_kernels())
        return [build, updates_in, updates_out, epochs, frontier_in, frontier_part, frontier_out, last_epoch, loop, lag, late, dead,
                tombstones, ready, waited, waiting, lost, interpreted]


def _interpreted_kernels() -> int:
    """How many kernels this process still runs as Python (0 where nothing was ever interpreted)."""
    interpreted = sys.modules.get("ddflow.operators.kernels.interpreted")
    return 0 if interpreted is None else interpreted.waiting_kernels()


def _known(configured: Iterable[str], *observed: Mapping[str, Any]) -> list[str]:
    names = dict.fromkeys(configured)
    for mapping in observed:
        names.update(dict.fromkeys(mapping))
    return list(names)


class WorkerLabel(Collector):
    """Another collector's families with the label ``worker`` added to every sample."""

    def __init__(self, inner: Collector, worker: int) -> None:
        self.inner = inner
        self.worker = str(worker)

    def describe(self) -> Iterable[Metric]:
        return self._label(self.inner.describe())

    def collect(self) -> Iterable[Metric]:
        return self._label(self.inner.collect())

    def _label(self, families: Iterable[Metric]) -> list[Metric]:
        out = []
        for family in families:
            family.samples = [sample._replace(labels={**sample.labels, "worker": self.worker})
                              for sample in family.samples]
            out.append(family)
        return out


class BulkHistogram(Collector):
    """A Prometheus histogram fed a whole array of observations at a time (``le`` buckets)."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = np.asarray(sorted(buckets), dtype=np.float64)
        self._counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, values: Iterable[float] | np.ndarray, counts: Iterable[int] | np.ndarray | None = None) -> None:
        """Add ``values`` (each ``counts[i]`` times when given: one latency shared by n updates)."""
        array = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=np.float64).ravel()
        if array.size == 0:
            return
        weights = None
        if counts is not None:
            weights = np.asarray(counts if isinstance(counts, np.ndarray) else list(counts), dtype=np.int64).ravel()
            if weights.shape != array.shape:
                raise ValueError(f"histogram {self.name}: {array.size} values but {weights.size} counts")
        # side="left": a value equal to a bound belongs to that bound's bucket (le = "less or equal")
        slots = np.searchsorted(self.bounds, array, side="left")
        added = np.bincount(slots, weights=weights, minlength=len(self._counts)).astype(np.int64)
        total = float(array.sum() if weights is None else (array * weights).sum())
        with self._lock:
            self._counts += added
            self._sum += total

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=[])]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total = self._sum
        family = HistogramMetricFamily(self.name, self.documentation, labels=[])
        buckets = [(_le(b), int(c)) for b, c in zip(self.bounds, cumulative[:-1], strict=True)]
        buckets.append(("+Inf", int(cumulative[-1])))
        family.add_metric([], buckets, total)
        return [family]


def _le(bound: float) -> str:
    return repr(float(bound))


class DaemonMetrics:
    """Every ddflow metric family, registered in ``registry``.

    ``inputs`` maps each input name to its late policy, ``outputs`` names the outputs and
    ``dead_letter_reasons`` the reasons a message can be dead-lettered: together they are the known
    series, exported at 0 before anything happens. ``snapshot`` and ``arrangements`` are called at
    scrape time and may be replaced once the worker exists (``bind``); ``broker`` returns the
    `kafka.liveness.BrokerWatch` the broker series read (`liveness`; None before it exists). ``worker`` of ``workers``:
    which worker of the dataflow this daemon is (the ``worker`` label of every series; its peers
    are the ``peer`` label of the exchange series).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        inputs: Mapping[str, str],
        outputs: Sequence[str],
        dead_letter_reasons: Sequence[str] = (),
        snapshot: Callable[[], MetricsSnapshot] | None = None,
        arrangements: Callable[[], Mapping[str, Mapping[str, int]] | None] | None = None,
        operators: Callable[[], Mapping[str, Mapping[str, int]] | None] | None = None,
        version: str | None = None,
        worker: int = 0,
        workers: int = 1,
        broker: Callable[[], Any] | None = None,
    ) -> None:
        self.registry = registry
        self.worker, self.workers = worker, workers
        self.inputs = dict(inputs)
        self.outputs = list(outputs)
        self.dead_letter_reasons = list(dead_letter_reasons)
        self.version = version or _version()
        self._lock = threading.Lock()
        self._snapshot = snapshot or MetricsSnapshot
        self._arrangements = arrangements or (lambda: None)
        self._operators = operators or (lambda: None)
        self.epoch_seconds = BulkHistogram(
            "ddflow_epoch_processing_seconds", "Wall time to process one epoch.", EPOCH_BUCKETS)
        self.latency_seconds = BulkHistogram(
            "ddflow_end_to_end_latency_seconds",
            "From an update's arrival to its output being final (published with progress).", LATENCY_BUCKETS)
        for collector in (self.epoch_seconds, self.latency_seconds, _SnapshotCollector(self),
                          ArrangementCollector(lambda: self._arrangements()),
                          OperatorCollector(lambda: self._operators()), BrokerCollector(broker or (lambda: None))):
            registry.register(WorkerLabel(collector, worker))

    def bind(
        self,
        snapshot: Callable[[], MetricsSnapshot],
        arrangements: Callable[[], Mapping[str, Mapping[str, int]] | None] | None = None,
        operators: Callable[[], Mapping[str, Mapping[str, int]] | None] | None = None,
    ) -> None:
        """Point the scrape-time collectors at a (new) worker."""
        with self._lock:
            self._snapshot = snapshot
            if arrangements is not None:
                self._arrangements = arrangements
            if operators is not None:
                self._operators = operators

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            source = self._snapshot
        return source()

    def observe_epoch(
        self,
        processing_seconds: float,
        latencies_seconds: Iterable[float] | np.ndarray = (),
        counts: Iterable[int] | np.ndarray | None = None,
    ) -> None:
        """Record one completed epoch: its processing time and the latencies of the updates it
        finalised (``counts[i]`` updates share ``latencies_seconds[i]`` when given)."""
        self.epoch_seconds.observe([processing_seconds])
        self.latency_seconds.observe(latencies_seconds, counts)

    def families(self) -> Iterator[str]:
        """Names of the families currently registered (for tests and the docs' metrics table)."""
        for metric in self.registry.collect():
            yield metric.name
