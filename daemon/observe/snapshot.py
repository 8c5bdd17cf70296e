"""What a scrape reports: a worker's cumulative figures at one instant (`MetricsSnapshot`), read
from the data path's plain counters (`snapshot_from_stats`); `metrics` turns it into families."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MetricsSnapshot", "snapshot_from_stats"]


@dataclass
class MetricsSnapshot:
    """Cumulative figures of a worker at one instant (what a scrape reports).

    Frontiers are data times in nanoseconds; ``None`` means not known yet and the least time (int64
    minimum) no progress yet (both exported as 0), ``float('inf')`` an input that is closed (empty
    frontier).
    """

    input_updates: Mapping[str, int] = field(default_factory=dict)
    output_updates: Mapping[str, int] = field(default_factory=dict)
    epochs: int = 0
    input_frontier_ns: Mapping[str, float | None] = field(default_factory=dict)
    output_frontier_ns: Mapping[str, float | None] = field(default_factory=dict)
    last_epoch_wall: float | None = None
    loop_wall: float | None = None  # when the worker loop last stepped (None: not running yet)
    consumer_lag: Mapping[tuple[str, int], int] = field(default_factory=dict)
    partition_frontier_ns: Mapping[tuple[str, int], float | None] = field(default_factory=dict)  # (input, p)
    late_updates: Mapping[tuple[str, str], int] = field(default_factory=dict)
    dead_letters: Mapping[tuple[str, str], int] = field(default_factory=dict)
    tombstones: Mapping[str, int] = field(default_factory=dict)
    ready: bool = False
    exchange_waited: Mapping[int, float] = field(default_factory=dict)  # seconds blocked on each other worker
    exchange_waiting_on: Sequence[int] = ()  # the workers it is blocked on now
    mesh_peers: Mapping[int, str] = field(default_factory=dict)  # over the mesh: each other worker's address
    mesh_lost: Sequence[int] = ()  # ... and those this worker found lost


def snapshot_from_stats(stats: Any, *, topics: Mapping[str, str], ready: bool,
                        exchange: Any = None) -> MetricsSnapshot:
    """A ``MetricsSnapshot`` read from the data path's ``ddflow.daemon.observe.stats.Stats``.

    ``topics`` maps input names to their topics (lag is labelled by topic and partition);
    ``exchange``: the worker's end of the exchange between workers (its ``waited`` and
    ``waiting_on``; over the mesh its ``peer_addresses`` and ``peers_lost``), or ``None`` for a
    worker alone.
    """
    input_updates, input_frontier, tombstones = {}, {}, {}
    lag: dict[tuple[str, int], int] = {}
    partition_frontier: dict[tuple[str, int], float | None] = {}
    late: dict[tuple[str, str], int] = {}
    dead: dict[tuple[str, str], int] = {}
    for name, s in list(stats.inputs.items()):
        input_updates[name] = s.updates
        tombstones[name] = s.tombstones
        input_frontier[name] = s.frontier
        for policy, count in s.late.items():
            if count:
                late[(name, policy)] = count
        for reason, count in list(s.dead_letters.items()):
            dead[(name, reason)] = count
        for partition, p in list(s.partitions.items()):
            partition_frontier[(name, partition)] = p.frontier
            if p.lag is not None:
                lag[(topics.get(name, name), partition)] = p.lag
    outputs = list(stats.outputs.items())
    last = [o.last_epoch_time for _, o in outputs if o.last_epoch_time is not None]
    return MetricsSnapshot(
        input_updates=input_updates,
        output_updates={name: o.updates for name, o in outputs},
        epochs=stats.epochs,
        input_frontier_ns=input_frontier,
        output_frontier_ns={name: o.frontier for name, o in outputs},
        last_epoch_wall=max(last) if last else None,
        loop_wall=getattr(stats, "loop_time", None),
        consumer_lag=lag,
        partition_frontier_ns=partition_frontier,
        late_updates=late,
        dead_letters=dead,
        tombstones=tombstones,
        ready=ready,
        exchange_waited=dict(getattr(exchange, "waited", None) or {}),
        exchange_waiting_on=tuple(getattr(exchange, "waiting_on", None) or ()),
        mesh_peers=dict(getattr(exchange, "peer_addresses", None) or {}),
        mesh_lost=tuple(sorted(getattr(exchange, "peers_lost", None) or ())),
    )
