"""The worker's seam: what a source gives it per poll and what a sink takes per epoch.

A `Worker` drives one `Source` and one `Sink` and knows nothing of Kafka. The Kafka
implementations are `source.KafkaSource` and `sink.KafkaSink`, built from a config in one place
(`factory`); `testing.ReplaySource` and `testing.ListSink` are in-memory ones for tests.

Per poll, a source returns a `Polled`: the good updates per input as columns (`block.Block`), already
decoded, validated, and moved or dropped by the late policy (bad ones it wrote as dead letters
through the sink's `dead_letters` writer); its `frontier` is the meet of what the inputs promised
so far. Its positions are ``(topic, partition) -> next offset to read``: everything before was
polled (`next_offsets`).

Per epoch ``[lower, upper)``, the sink takes each output's final diffs and the source's positions
(`Sink.publish`) and makes them durable together with the other epochs of its commit window
(`commits.CommitWindow`): the sink owns the commit, so the epochs' outputs, the dead letters written
meanwhile and the consumed input offsets become visible at once or not at all (Kafka: one
transaction with ``send_offsets_to_transaction``). A sink may commit in the background while the
worker computes the next epochs (`commits.Committer`); ``committed_upper`` moves, and the worker
reports epochs final, only when a commit landed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .block import Block
from .deadletter import DeadLetterWriter
from .observe.stats import Stats

__all__ = ["Update", "Offsets", "Polled", "Source", "Sink"]

Update = tuple[Any, int, int]  # (data, time, diff)
Offsets = Mapping[tuple[str, int], int]  # (topic, partition) -> next offset to read


@dataclass
class Polled:
    """The result of one poll: good updates per input as `block.Block` columns (one block per
    message, in order), and latency bookkeeping."""

    blocks: dict[str, list[Block]]
    messages: int = 0
    # (input, arrival wall-clock seconds of the earliest message, number of updates, largest time)
    batches: list[tuple[str, float, int, int]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(b) for blocks in self.blocks.values() for b in blocks)

    @property
    def updates(self) -> dict[str, list[Update]]:
        """The good updates per input as ``(data, time, diff)`` tuples (built on each call)."""
        return {name: [u for b in blocks for u in b.rows()] for name, blocks in self.blocks.items()}


@runtime_checkable
class Source(Protocol):
    """Where a worker's input updates come from (see the module docstring).

    ``inputs`` are the `source.InputSpec` it reads; ``stats`` its counters; ``assigned`` whether it
    is open. The recovery arguments of `open` (start offsets, reclock ``bindings``, partition
    ``floors``, recorded ``progress``, a snapshot's ``floor``) are those `recovery.Recovery` gives.
    """

    inputs: Sequence[Any]
    stats: Stats

    @property
    def assigned(self) -> bool: ...

    def open(self, start_offsets: Offsets | None = None, bindings: Mapping[str, Any] | None = None, *,
             floors: Mapping[str, Any] | None = None, progress: Mapping[str, Any] | None = None,
             floor: int | None = None) -> None: ...

    def close(self) -> None: ...

    def poll(self, frontier: int, *, max_messages: int = 10_000, timeout: float = 0.05,
             max_updates: int | None = None) -> Polled:
        """Read what is there (up to ``max_messages``, waiting at most ``timeout`` seconds for the
        first); ``frontier`` is what the engine's inputs were advanced to. ``max_updates``: stop
        after the message that brings the updates taken to that many (the rest waits)."""
        ...

    @property
    def paused(self) -> set[tuple[str, int]]:
        """The (topic, partition)s not read for now."""
        ...

    def pause_ahead(self, frontier: int | None, *, hold: bool = True) -> None:
        """Read only the partitions that hold the inputs' frontier at ``frontier`` (the worker has
        little room for more updates until an epoch closes) until `resume`; with ``hold``, each
        only up to the marker that takes it beyond ``frontier``."""
        ...

    def resume(self) -> None:
        """Read every partition again."""
        ...

    def frontier(self) -> int | None:
        """The inputs' frontier now: no update at a time before it will come (None: unknown yet)."""
        ...

    def raise_to(self, upper: int) -> None:
        """The worker's frontier moved to ``upper``: inputs behind it start there."""
        ...

    def persist(self) -> None:
        """Make what replays depend on durable (before outputs that depend on it are published)."""
        ...

    def next_offsets(self) -> dict[tuple[str, int], int]: ...

    def progress_state(self) -> dict[str, dict[int, tuple[int, int | None]]]: ...


@runtime_checkable
class Sink(Protocol):
    """Where a worker's epochs go (see the module docstring).

    ``outputs`` are the `sink.OutputSpec` it publishes; ``dead_letters`` (None: no dead-letter
    destination) is the writer a source writes bad input to;
    what it stages commits with the next `publish` or `commit_dead_letters`. ``incarnation`` names
    this writer's attempts (it changes when a commit is retried).
    """

    outputs: Sequence[Any]
    dead_letters: DeadLetterWriter | None
    incarnation: str
    stats: Stats

    def open(self, resume: Mapping[str, Any] | None = None, *, stop: Callable[[], bool] | None = None) -> None:
        """Get ready to publish; ``resume``: what `positions` returned when a checkpoint was taken
        (None: learn what is already published from scratch); ``stop``: a stop request, which ends
        a long read at open with `exceptions.Stopped`."""
        ...

    def close(self) -> None: ...

    def positions(self) -> Mapping[str, Any]:
        """Where a restart may resume reading back what this sink published (kept in checkpoints)."""
        ...

    @property
    def committed_upper(self) -> int | None:
        """The upper of the last epoch committed (``MIN_TIME`` before the first, None: the outputs
        are closed for good): every epoch below it is final."""
        ...

    def publish(self, lower: int, upper: int | None, updates: Mapping[str, Block | Sequence[Update]], *,
                offsets: Offsets | None = None, snapshot: bool = False) -> dict[str, int]:
        """Add epoch ``[lower, upper)`` (upper None: final forever), each output's updates as a
        `block.Block` (a worker's) or ``(record, time, diff)`` tuples, to the commit window: it becomes
        durable with the window's other epochs, the staged dead letters and the input ``offsets``,
        all or nothing, when the window is committed (at once if its interval has passed; see
        `commits.CommitWindow`). ``snapshot``: the epoch publishes the contents of the snapshot the
        worker started from (a format may say so). Returns the updates written per output."""
        ...

    def commit(self) -> bool:
        """Commit the window and the staged dead letters now, and wait for every commit started
        so far to land; whether anything landed."""
        ...

    def maybe_commit(self, idle: bool = False) -> bool:
        """Take the outcome of a commit that finished (raising its failure) and commit the window
        if its interval has passed, or at once when ``idle`` (the worker read all the input there
        is) and no commit is in flight; whether a commit landed."""
        ...

    def pending(self) -> int:
        """Epochs published and not committed yet (in the window or being committed)."""
        ...

    def staged_for(self) -> float:
        """Seconds since the oldest dead letter waiting for a commit (0 if none)."""
        ...

    def commit_dead_letters(self) -> None: ...
