"""Testing helpers: replay recorded updates into a dataflow, and run it until a time is complete.

A test describes an input as a list of updates ``(data, time, diff)`` and an *epoch schedule*,
the increasing list of boundaries the input's frontier moves through. Epoch ``i`` holds the
updates whose time lies in ``[boundaries[i-1], boundaries[i])``; replaying it feeds those updates
(in their recorded order, which need not be time order) and then calls ``advance_to(boundaries[i])``.
The updates at or after the last boundary form a final epoch, after which the input is closed
(or left open). A step may also *hold* the frontier (feed, do not advance), which is how a test
makes one input lag behind another.

Several sources replay in lockstep (:func:`lockstep`); :func:`run_until` runs a dataflow, feeding
further epochs as needed, until a time is complete at a capture, and returns the collection there.
:func:`random_source` and :func:`sliding_window_graph` build sources for tests and benchmarks.

Nothing here imports hypothesis; property-test strategies live with the tests.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ddflow.operators.errors import DataflowError

__all__ = [
    "Epoch",
    "ReplayError",
    "ReplaySource",
    "accumulate",
    "accumulate_at",
    "is_complete",
    "lockstep",
    "random_source",
    "replay",
    "run_until",
    "sliding_window_graph",
    "window_edges",
]

Update = tuple[Hashable, int, int]


class ReplayError(DataflowError):
    """A replay schedule that cannot be fed, or a run that cannot reach the requested time."""


class InputSession(Protocol):
    """What a replay needs from an input session (``Dataflow.new_input`` returns one)."""

    def update(self, record: Any, time: int, diff: int) -> None: ...

    def advance_to(self, time: int) -> None: ...

    def close(self) -> None: ...


class Probe(Protocol):
    """What :func:`run_until` needs from a capture."""

    @property
    def frontier(self) -> list[int]: ...

    def at(self, time: int) -> dict[Any, int]: ...


class Runnable(Protocol):
    def run(self) -> None: ...


@dataclass(frozen=True)
class Epoch:
    """One replay step: feed ``updates``, then advance to ``advance`` (if any), then close (if ``close``)."""

    updates: tuple[Update, ...]
    advance: int | None
    close: bool

    def feed(self, session: InputSession) -> None:
        for record, time, diff in self.updates:
            session.update(record, time, diff)
        if self.advance is not None:
            session.advance_to(self.advance)
        if self.close:
            session.close()


def _check_update(update: Any) -> Update:
    try:
        record, time, diff = update
    except (TypeError, ValueError) as exc:
        raise ReplayError(f"replay: an update must be (data, time, diff), got {update!r}") from exc
    if not isinstance(time, int) or isinstance(time, bool):
        raise ReplayError(f"replay: time must be an int (ns), got {time!r} in {update!r}")
    if not isinstance(diff, int) or isinstance(diff, bool) or diff == 0:
        raise ReplayError(f"replay: diff must be a non-zero int, got {diff!r} in {update!r}")
    return record, time, diff


class ReplaySource:
    """A replayable list of ``(data, time, diff)`` with an epoch schedule.

    ``boundaries`` must be strictly increasing ints. ``hold[i]`` (default all False) keeps the
    frontier where it is after epoch ``i`` instead of advancing it to ``boundaries[i]``.
    ``close`` closes the input after the final epoch (the updates at or after the last boundary).
    """

    def __init__(
        self,
        updates: Iterable[Update],
        boundaries: Iterable[int] = (),
        *,
        hold: Sequence[bool] | None = None,
        close: bool = True,
    ) -> None:
        self.updates: tuple[Update, ...] = tuple(_check_update(u) for u in updates)
        self.boundaries: tuple[int, ...] = tuple(boundaries)
        for b in self.boundaries:
            if not isinstance(b, int) or isinstance(b, bool):
                raise ReplayError(f"replay: epoch boundary must be an int, got {b!r}")
        for a, b in zip(self.boundaries, self.boundaries[1:]):
            if not a < b:
                raise ReplayError(f"replay: epoch boundaries must increase, got {a!r} then {b!r}")
        if hold is None:
            hold = [False] * len(self.boundaries)
        if len(hold) != len(self.boundaries):
            raise ReplayError(
                f"replay: hold has {len(hold)} entries for {len(self.boundaries)} boundaries"
            )
        self.hold = tuple(bool(h) for h in hold)
        self.close = close
        self.epochs: tuple[Epoch, ...] = self._split()

    def _split(self) -> tuple[Epoch, ...]:
        buckets: list[list[Update]] = [[] for _ in range(len(self.boundaries) + 1)]
        for update in self.updates:
            index = _bisect_right(self.boundaries, update[1])
            buckets[index].append(update)
        epochs = [
            Epoch(tuple(bucket), None if held else boundary, False)
            for bucket, boundary, held in zip(buckets, self.boundaries, self.hold)
        ]
        epochs.append(Epoch(tuple(buckets[-1]), None, self.close))
        return tuple(epochs)

    def __len__(self) -> int:
        return len(self.epochs)

    def __repr__(self) -> str:
        return (
            f"ReplaySource({len(self.updates)} updates, boundaries={list(self.boundaries)}, "
            f"hold={[i for i, h in enumerate(self.hold) if h]}, close={self.close})"
        )

    def feed(self, session: InputSession, epoch: int) -> Epoch:
        """Feed epoch number ``epoch`` into ``session``; return it."""
        step = self.epochs[epoch]
        step.feed(session)
        return step

    def replay(self, session: InputSession) -> Iterator[Epoch]:
        """Feed every epoch in turn, yielding each after it has been fed."""
        for step in self.epochs:
            step.feed(session)
            yield step

    def frontier_after(self, epoch: int) -> int | None:
        """The last time the frontier was advanced to by epochs ``0..epoch``; ``None`` if never."""
        last = None
        for i in range(min(epoch + 1, len(self.boundaries))):
            if not self.hold[i]:
                last = self.boundaries[i]
        return last

    def closed_after(self, epoch: int) -> bool:
        """Whether the input is closed once epochs ``0..epoch`` are fed."""
        return self.close and epoch >= len(self.epochs) - 1

    def times(self) -> list[int]:
        """The distinct update times, ascending."""
        return sorted({time for _, time, _ in self.updates})

    def accumulate(self, time: int) -> dict[Hashable, int]:
        """The collection at ``time``: per record, the sum of diffs at times ``<= time`` (zeros absent)."""
        return accumulate(self.updates, time)


def _bisect_right(xs: Sequence[int], x: int) -> int:
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def accumulate(updates: Iterable[tuple[Hashable, int, int]], time: int) -> dict[Hashable, int]:
    """Sum ``diff`` per record over updates with time ``<= time``; drop zero multiplicities."""
    totals: dict[Hashable, int] = {}
    for record, t, diff in updates:
        if t <= time:
            totals[record] = totals.get(record, 0) + diff
    return {record: count for record, count in totals.items() if count != 0}


def accumulate_at(
    updates: Iterable[tuple[Hashable, int, int]], times: Iterable[int]
) -> dict[int, dict[Hashable, int]]:
    """:func:`accumulate` at each of ``times`` in one sweep over the updates sorted by time."""
    ordered = sorted(updates, key=lambda u: u[1])
    totals: dict[Hashable, int] = {}
    result: dict[int, dict[Hashable, int]] = {}
    i = 0
    for time in sorted(set(times)):
        while i < len(ordered) and ordered[i][1] <= time:
            record, _, diff = ordered[i]
            totals[record] = totals.get(record, 0) + diff
            i += 1
        result[time] = {record: count for record, count in totals.items() if count != 0}
    return result


def is_complete(frontier: Sequence[int], time: int) -> bool:
    """True iff ``time`` is not ``>=`` any element of ``frontier`` (an empty frontier completes all)."""
    return all(not f <= time for f in frontier)


def lockstep(pairs: Sequence[tuple[InputSession, ReplaySource]]) -> Iterator[int]:
    """Feed epoch ``i`` of every source into its session, for i = 0, 1, ...; yield ``i`` after each.

    Sources with fewer epochs simply stop feeding (a closed input stays closed).
    """
    rounds = max((len(source) for _, source in pairs), default=0)
    for i in range(rounds):
        for session, source in pairs:
            if i < len(source):
                source.feed(session, i)
        yield i


def replay(df: Runnable, pairs: Sequence[tuple[InputSession, ReplaySource]]) -> Iterator[int]:
    """Like :func:`lockstep`, but runs ``df`` after every epoch before yielding its index."""
    for i in lockstep(pairs):
        df.run()
        yield i


def run_until(
    df: Runnable,
    probe: Probe,
    time: int,
    steps: Iterator[Any] | None = None,
    *,
    max_steps: int | None = None,
) -> dict[Any, int]:
    """Run ``df``, feeding one more step from ``steps`` between runs, until ``time`` is complete.

    Returns ``probe.at(time)``. Raises :class:`ReplayError` naming the frontier if the steps run
    out (or ``max_steps`` is reached) while ``time`` is still incomplete.
    """
    df.run()
    taken = 0
    while not is_complete(probe.frontier, time):
        if steps is None or (max_steps is not None and taken >= max_steps):
            raise ReplayError(
                f"run_until: time {time} still incomplete at frontier {probe.frontier} "
                f"after {taken} steps"
            )
        try:
            next(steps)
        except StopIteration:
            raise ReplayError(
                f"run_until: inputs exhausted with time {time} still incomplete "
                f"at frontier {probe.frontier}"
            ) from None
        taken += 1
        df.run()
    return probe.at(time)


def random_source(
    seed: int,
    records: Sequence[Hashable],
    *,
    epochs: int = 10,
    per_epoch: int = 20,
    width: int = 1_000,
    base: int = 0,
    diffs: Sequence[int] = (-2, -1, 1, 2),
    close: bool = True,
) -> ReplaySource:
    """A seeded random source: ``epochs`` epochs of ``width`` ns, ``per_epoch`` updates in each
    at random times inside the epoch, records drawn from ``records``, diffs from ``diffs``."""
    rng = random.Random(seed)
    updates = [
        (rng.choice(records), base + e * width + rng.randrange(width), rng.choice(diffs))
        for e in range(epochs)
        for _ in range(per_epoch)
    ]
    boundaries = [base + (e + 1) * width for e in range(epochs)]
    return ReplaySource(updates, boundaries, close=close)


def window_edges(nodes: int, edges: int, changes: int, *, seed: int = 42) -> Any:
    """The edge list of the sliding-window graph workload: an int64 array of shape
    ``(edges + changes, 2)`` of ``(src, dst)`` rows, ``numpy.random.default_rng(seed).integers(0,
    nodes, (edges + changes, 2))``. Edges ``0..edges-1`` are the first window; change ``k`` removes
    edge ``k`` and adds edge ``edges + k`` (`sliding_window_graph` replays it; the benchmarks use
    the same list)."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, nodes, (edges + changes, 2))


def sliding_window_graph(
    nodes: int,
    edges: int,
    changes: int,
    *,
    seed: int = 42,
    epoch_changes: int = 1_000,
    start: int = 0,
) -> ReplaySource:
    """The sliding-window graph workload of the 2016 roadmap, as a replay source.

    Edge list ``numpy.random.default_rng(seed).integers(0, nodes, (edges + changes, 2))``; the
    first ``edges`` edges are inserted at time ``start``; change ``k`` (``0 <= k < changes``)
    removes edge ``k`` and inserts edge ``edges + k`` at its own time ``start + 1 + k``. The
    frontier advances after the initial load and after every ``epoch_changes`` changes; the input
    is left open. Records are ``(src, dst)`` tuples of Python ints.
    """
    pairs = window_edges(nodes, edges, changes, seed=seed).tolist()
    graph = [(int(s), int(d)) for s, d in pairs]
    updates: list[Update] = [(edge, start, 1) for edge in graph[:edges]]
    for k in range(changes):
        time = start + 1 + k
        updates.append((graph[k], time, -1))
        updates.append((graph[edges + k], time, 1))
    boundaries = [start + 1] + [
        start + 1 + k for k in range(epoch_changes, changes + 1, epoch_changes)
    ]
    if boundaries[-1] != start + 1 + changes:
        boundaries.append(start + 1 + changes)
    return ReplaySource(updates, boundaries, close=False)
