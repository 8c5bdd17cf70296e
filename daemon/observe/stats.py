"""Counters the data path keeps, for metrics and tests to read (no Prometheus here).

A `Stats` object is shared by the sources, sinks and the worker of one process. It holds
cumulative counters per input and output, per-partition progress and lag, and calls
``on_epoch`` listeners with an `EpochReport` after every published epoch, which is where
histograms (epoch seconds, end-to-end latency) get their samples. Readers may look at the
counters at any time (e.g. a Prometheus collector at scrape time); values only grow, except
frontiers, lags and sizes, which are current values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["PartitionStats", "InputStats", "OutputStats", "EpochReport", "Stats"]


@dataclass
class PartitionStats:
    """One input partition. ``lag`` comes from the broker's high watermark: informational only
    (some brokers, e.g. tansu, report wrong watermarks)."""

    offset: int = -1  # next offset to read
    high_watermark: int | None = None
    lag: int | None = None
    frontier: int | None = None
    idle: bool = False


@dataclass
class InputStats:
    messages: int = 0
    bytes: int = 0
    updates: int = 0
    progress_markers: int = 0
    ignored_progress_markers: int = 0  # markers on reclocked inputs
    tombstones: int = 0  # null values skipped (Debezium's tombstones after deletes)
    late_advanced: int = 0
    late_rejected: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)  # by reason
    frontier: int | None = None
    last_update_time: float | None = None  # wall-clock seconds of the last update read
    partitions: dict[int, PartitionStats] = field(default_factory=dict)

    @property
    def late(self) -> dict[str, int]:
        """Late updates by policy applied."""
        return {"advance": self.late_advanced, "reject": self.late_rejected}


@dataclass
class OutputStats:
    updates: int = 0
    messages: int = 0
    progress_markers: int = 0
    suppressed_updates: int = 0  # already final in the result topic (restart)
    frontier: int | None = None
    last_epoch_time: float | None = None


@dataclass(frozen=True)
class EpochReport:
    """One published epoch ``[lower, upper)``."""

    number: int
    lower: int
    upper: int | None
    seconds: float  # engine run + publish + commit
    updates_in: dict[str, int]  # per input, fed during the epoch
    updates_out: dict[str, int]  # per output
    latencies: list[tuple[float, int]]  # (seconds from arrival to final, number of updates)
    incarnation: str


@dataclass
class Stats:
    inputs: dict[str, InputStats] = field(default_factory=dict)
    outputs: dict[str, OutputStats] = field(default_factory=dict)
    epochs: int = 0
    input_frontier: int | None = None
    output_frontier: int | None = None
    last_epoch: EpochReport | None = None
    loop_time: float | None = None  # wall-clock seconds when the worker loop last stepped
    listeners: list[Callable[[EpochReport], None]] = field(default_factory=list)

    def input(self, name: str) -> InputStats:
        stats = self.inputs.get(name)
        if stats is None:
            stats = self.inputs[name] = InputStats()
        return stats

    def output(self, name: str) -> OutputStats:
        stats = self.outputs.get(name)
        if stats is None:
            stats = self.outputs[name] = OutputStats()
        return stats

    def on_epoch(self, listener: Callable[[EpochReport], None]) -> None:
        """Call ``listener(report)`` after every published epoch."""
        self.listeners.append(listener)

    def epoch_published(self, report: EpochReport) -> None:
        self.epochs += 1
        self.last_epoch = report
        self.output_frontier = report.upper
        for listener in self.listeners:
            listener(report)
