"""Restoring a worker: which snapshot, where its inputs resume, and loading while live input flows.

On open, a worker with a checkpoint directory restores the newest valid checkpoint; if there is
none it loads the snapshot given with ``--snapshot-from`` (a backfill), if any; otherwise it starts
empty and replays its inputs from the beginning. A snapshot must describe the worker's inputs (same
names, topics and columns). Consumption resumes at the snapshot's offsets once the broker is seen
to still hold them (`offsets.check_offsets`): offsets below a partition's first offset (deleted by
retention), beyond its end (a recreated topic), or on a partition that no longer exists raise
`RecoveryError` instead of skipping data. A partition the snapshot does not mention is read from
its beginning.

The snapshot loads in a thread (`loader.SnapshotLoader`) while the worker already consumes live
input; the worker holds its frontier at the snapshot's frontier ``F`` until the load is done. Then
each input's ``base`` (the collection accumulated below ``F``) enters the engine at time ``F - 1``,
the last time below ``F``, and its ``pending`` updates at their own times, and one epoch
``[MIN_TIME, F)`` publishes the output accumulated at ``F``: the sink drops it when the result topic
already holds it (a restored checkpoint) and publishes it otherwise (a backfill); the live diffs
follow.

`Recovery` writes a checkpoint every ``interval`` seconds at an epoch boundary: each input as the
engine holds it (`attach`: the inputs' `ddflow.operators.input.InputState`, an arrangement of each
input compacted to its frontier, read when a checkpoint is due; the daemon keeps no copy of its
own), and in the manifest's ``extra`` each input partition's frontier, so a replay judges late
updates as before, and each result partition's position, so a restart reads only what follows it.
The state is read in the worker's thread and written in a background thread, so epochs go on
meanwhile. It also keeps the reclock bindings of
reclocked inputs (`reclock`) under ``<directory>/reclock/<topic>.log`` and the partition floors of
the others (`floors`) under ``<directory>/floors/<topic>.log``, dropping what no kept checkpoint
needs once a checkpoint is written. A checkpoint a crash interrupts is lost (the one before is
restored), so the snapshot writer's one-time start-up (about a second: pyarrow imports pandas) is
paid when the worker is built, not inside its first background write - which a worker crashing
soon after each start would otherwise never finish, replaying its inputs from the beginning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import OptionsError, RecoveryError, SnapshotError, WorkerError
from ..input.floors import FloorLog
from ..input.reclock import ReclockBindings
from ..input.source import InputSpec
from ..kafka.client import topic_partitions
from .checkpoint import CheckpointStore, InputState
from .loader import SnapshotLoader  # re-exported, as is check_offsets: imported (and patched) here
from .offsets import check_offsets
from .snapshot import Snapshot, columns_for_fields, prepare_writes

__all__ = ["Recovery", "SnapshotLoader", "check_offsets"]

log = logging.getLogger("ddflow.daemon.state.recovery")

_INT64_MAX = (1 << 63) - 1

class Recovery:
    """A worker's checkpoints, its restore, and the reclock bindings of its reclocked inputs."""

    def __init__(
        self,
        inputs: Sequence[InputSpec],
        kafka_options: Mapping[str, Any],
        *,
        directory: str | None = None,
        snapshot_from: str | None = None,
        interval: float = 60.0,
        keep: int = 3,
        shards: int = 4,
        monotonic: Any = time.monotonic,
        worker: tuple[int, int] = (0, 1),
    ) -> None:
        if not isinstance(interval, (int, float)) or interval <= 0:
            raise OptionsError(f"checkpoint interval: expected seconds > 0, got {interval!r}")
        self.inputs = list(inputs)
        self.worker = worker  # (index, count): this worker reads the input partitions p % count == index
        self.kafka_options = dict(kafka_options)
        self.snapshot_from = snapshot_from
        self.interval = float(interval)
        self.store = None if directory is None else CheckpointStore(directory, keep=keep, shards=shards)
        if self.store is not None:
            prepare_writes()  # not in the first background write, which a crash soon after start would lose
        self.states: dict[str, Any] = {}  # input name -> the engine's InputState (`attach`)
        self._bounds: dict[str, int] = {}  # input name -> the sum of |diff| fed, a bound of any count
        self.bindings: dict[str, ReclockBindings] = {}
        self.floors: dict[str, FloorLog] = {}
        if self.store is not None:
            for spec in inputs:
                if spec.policy == "reclock":
                    log_path = Path(directory or ".") / "reclock" / f"{spec.topic}.log"
                    self.bindings[spec.topic] = ReclockBindings(log_path)
                else:
                    self.floors[spec.topic] = FloorLog(Path(directory or ".") / "floors" / f"{spec.topic}.log")
        self._monotonic = monotonic
        self._last = monotonic()
        self.restored: Snapshot | None = None
        self._named: Snapshot | None = None  # the snapshot_from snapshot, once opened (`named`)
        self.written: list[Snapshot] = []
        self._writer: threading.Thread | None = None
        self._result: Snapshot | None = None
        self._error: BaseException | None = None

    @property
    def enabled(self) -> bool:
        """Whether checkpoints are written (a directory is configured)."""
        return self.store is not None

    # -- choosing and checking what to restore --------------------------------------------------

    def choose(self) -> Snapshot | None:
        """The newest valid checkpoint, else the ``snapshot_from`` snapshot (checked), else None."""
        snapshot = self.store.latest() if self.store is not None else None
        if snapshot is None:
            return self.named()
        log.info("restoring checkpoint %s at frontier %d", snapshot.path.name, snapshot.frontier)
        self.check_fits(snapshot)
        self.restored = snapshot
        return snapshot

    def named(self) -> Snapshot | None:
        """The ``snapshot_from`` snapshot, opened, verified and checked (None without one), as the
        snapshot to restore. It must hold every worker's inputs: one worker's checkpoint of several
        (its manifest names the worker, ``extra["mesh"]``: only its share of the inputs) is refused."""
        snapshot = None
        if self.snapshot_from is not None:
            snapshot = Snapshot.open(self.snapshot_from)  # a named snapshot must be valid: no fallback
            snapshot.verify()
            if snapshot.manifest.extra.get("mesh") is not None:
                raise SnapshotError(f"{snapshot}: it is the checkpoint of one worker of several (it holds only "
                                    "that worker's share of the inputs); start from a snapshot of the whole inputs: "
                                    "a backfill, or a single worker's checkpoint")
            log.info("loading snapshot %s (origin %s) at frontier %d%s", snapshot.path, snapshot.manifest.origin,
                     snapshot.frontier, "" if self.worker[1] == 1 else
                     f": worker {self.worker[0]} of {self.worker[1]} loads the keys it owns")
            self.check_fits(snapshot)
        self.restored = self._named = snapshot
        return snapshot

    def shared(self, snapshot: Snapshot | None) -> bool:
        """Whether ``snapshot`` is the named one (``snapshot_from``, not a checkpoint of this worker's)
        loaded by one worker of several: each loads its share of it (`load`) and the workers close
        its epoch together; what it says of the result topics is not this worker's to resume from."""
        return snapshot is not None and snapshot is self._named and self.worker[1] > 1

    def check_fits(self, snapshot: Snapshot) -> None:
        """SnapshotError unless the snapshot's inputs are the worker's (names, topics, columns)."""
        specs = {spec.name: spec for spec in self.inputs}
        for name, entry in snapshot.inputs.items():
            spec = specs.get(name)
            if spec is None:
                raise SnapshotError(f"{snapshot}: it holds input {name!r}, which this dataflow does not have "
                                    f"(inputs: {sorted(specs)})")
            if entry.topic != spec.topic:
                raise SnapshotError(f"{snapshot}: input {name!r} was read from topic {entry.topic!r}, the worker reads "
                                    f"{spec.topic!r}; its offsets do not apply")
            expected = columns_for_fields(spec.fields)
            if entry.columns != expected:
                got = ", ".join(f"{c.name}:{c.type}" for c in entry.columns)
                want = ", ".join(f"{c.name}:{c.type}" for c in expected)
                raise SnapshotError(f"{snapshot}: input {name!r} has columns ({got}), the worker's fields give "
                                    f"({want})")
        for name in specs.keys() - snapshot.inputs.keys():
            log.warning("%s has no input %r: it starts empty and is read from the beginning", snapshot, name)

    def start_offsets(self, snapshot: Snapshot | None) -> dict[tuple[str, int], int]:
        """Where each input partition resumes: the snapshot's offsets (others from 0), checked on the
        broker, and covered by the reclock bindings."""
        offsets: dict[tuple[str, int], int] = {}
        if snapshot is not None:
            for entry in snapshot.inputs.values():
                if entry.offsets is None:
                    log.warning("%s records no offsets for input %r: topic %r is read from the beginning",
                                snapshot, entry.name, entry.topic)
                    continue
                offsets.update({(entry.topic, p): o for p, o in entry.offsets.items()})
            check_offsets(self.kafka_options, offsets)
        for topic, bindings in self.bindings.items():
            for p in range(self.worker[0], topic_partitions(self.kafka_options, topic), self.worker[1]):
                bindings.check_start(p, offsets.get((topic, p), 0), topic)
        for topic, floors in self.floors.items():
            for p in sorted(floors.since):
                warning = floors.check_start(p, offsets.get((topic, p), 0))
                if warning:
                    log.warning("input topic %r %s", topic, warning)
        return offsets

    @staticmethod
    def output_positions(snapshot: Snapshot | None) -> dict[str, Any] | None:
        """Where the result topics may be read from, as a checkpoint recorded it (`KafkaSink.open`'s
        ``resume``); None for a backfill snapshot or an older checkpoint: read them from 0."""
        recorded = None if snapshot is None else snapshot.manifest.extra.get("outputs")
        if recorded is None:
            return None
        try:
            return {
                "finals": {topic: [int(f) for f in finals] for topic, finals in recorded["finals"].items()},
                "starts": {(topic, int(p)): int(o) for topic, parts in recorded["starts"].items()
                           for p, o in parts.items()},
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{snapshot}: its recorded result-topic positions are malformed ({exc})") from exc

    @staticmethod
    def progress(snapshot: Snapshot | None) -> dict[str, dict[int, tuple[int, int | None]]]:
        """topic -> partition -> (frontier, largest time) recorded by a checkpoint (empty for a
        backfill snapshot or a checkpoint written before partition frontiers were recorded)."""
        if snapshot is None:
            return {}
        recorded = snapshot.manifest.extra.get("progress") or {}
        try:
            return {topic: {int(p): (int(f), None if m is None else int(m)) for p, (f, m) in parts.items()}
                    for topic, parts in recorded.items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{snapshot}: its recorded partition frontiers are malformed ({exc})") from exc

    def load(self, snapshot: Snapshot) -> SnapshotLoader:
        """Load ``snapshot`` in the background: whole, or this worker's share when `shared`."""
        return SnapshotLoader(snapshot, list(snapshot.inputs), owner=self.worker if self.shared(snapshot) else None)

    # -- checkpointing --------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether a checkpoint is due: ``interval`` seconds passed since the last one was started
        (or a snapshot loaded). Workers that agree on when to checkpoint say this in their vote."""
        return self.store is not None and self._monotonic() - self._last >= self.interval

    def restarted_timer(self) -> None:
        """Count the checkpoint interval from now (a snapshot was just loaded)."""
        self._last = self._monotonic()

    @property
    def last_frontier(self) -> int | None:
        """The frontier of the last checkpoint written or restored."""
        if self.written:
            return self.written[-1].frontier
        return None if self.restored is None else self.restored.frontier

    def attach(self, states: Mapping[str, Any]) -> None:
        """The engine's state of each input (`ddflow.operators.input.InputState`, input name ->
        state), which checkpoints read."""
        self.states = dict(states)
        self._bounds = {name: 0 for name in self.states}

    def fed(self, name: str, diffs: Any) -> None:
        """The worker fed ``diffs`` (an int64 array) to input ``name``: no count of it can now be
        larger in magnitude than the sum of every |diff| fed (what `check` relies on)."""
        if name not in self._bounds or not len(diffs):
            return
        largest = max(-int(diffs.min()), int(diffs.max()))
        if largest < 1 << 31 and len(diffs) < 1 << 31:  # the int64 sum is exact
            self._bounds[name] += int(np.abs(diffs).sum())
        else:
            self._bounds[name] += sum(abs(d) for d in diffs.tolist())

    def check(self, upper: int) -> None:
        """Before the epoch up to ``upper`` is published: raise `WorkerError` when an input's count
        at ``upper`` is outside int64, which a checkpoint could not hold. Free while the diffs fed
        so far cannot add up to that (their magnitudes sum within int64); past that,
        the engine's state of the input is consolidated at each epoch."""
        from ...operators.errors import DiffError  # loaded with the dataflow already

        if self.store is None:
            return
        for name, state in self.states.items():
            if self._bounds.get(name, 0) <= _INT64_MAX:
                continue
            try:
                state.base_ids()
            except DiffError as exc:  # the engine names the input and the record
                raise WorkerError(str(exc)) from exc

    def epoch_published(
        self, upper: int, next_offsets: Mapping[tuple[str, int], int], *, force: bool = False,
        extra: Callable[[], Mapping[str, Any]] | None = None, before_write: Callable[[], None] | None = None,
    ) -> None:
        """Start writing a checkpoint at ``upper`` in the background if one is due and none is
        being written (``force``: write it now and wait).
        ``before_write()`` runs first when one is written (the sink commits what it holds: a
        checkpoint never gets ahead of the published outputs); ``extra()`` then gives what else the
        checkpoint's manifest records."""
        if self.store is None:
            return
        self.collect()
        if force or (self._writer is None and self._monotonic() - self._last >= self.interval):
            if before_write is not None:
                before_write()
            self.checkpoint(upper, next_offsets, wait=force, extra=None if extra is None else extra())

    def checkpoint(self, frontier: int, next_offsets: Mapping[tuple[str, int], int], *,
                   wait: bool = True, extra: Mapping[str, Any] | None = None) -> Snapshot | None:
        """Write a checkpoint at ``frontier``, the frontier the dataflow last ran to, of the inputs
        as the engine holds them (read here, in the worker's thread): now (``wait``; returns it) or
        in a background thread (`finish` collects it). ``extra`` goes into the manifest (e.g.
        ``{"progress": ...}``, JSON-ready)."""
        if self.store is None:
            raise OptionsError("writing a checkpoint: no checkpoint directory is configured")
        self.finish()
        self._last = self._monotonic()
        inputs = []
        for spec in self.inputs:
            engine = self.states.get(spec.name)
            if engine is None:
                raise OptionsError(f"writing a checkpoint: the worker attached no state for input {spec.name!r}")
            if engine.frontier != frontier:
                raise RecoveryError(f"writing a checkpoint at {frontier}: input {spec.name!r} was last run to "
                                    f"{engine.frontier}")
            records, counts, pending = engine.read()
            offsets = {p: o for (topic, p), o in next_offsets.items() if topic == spec.topic}
            state = InputState(records, counts, pending)
            inputs.append((spec.name, spec.topic, columns_for_fields(spec.fields), state, offsets))
        store = self.store
        extra = dict(extra or {})
        if wait:
            snapshot = store.write(frontier, inputs, extra=extra)
            self._written(snapshot)
            return snapshot

        def write() -> None:
            try:
                self._result = store.write(frontier, inputs, extra=extra)
            except BaseException as exc:  # re-raised by finish() in the worker's thread
                self._error = exc

        self._writer = threading.Thread(target=write, name="ddflow-checkpoint-writer", daemon=True)
        self._writer.start()
        return None

    def collect(self) -> None:
        """Collect a background checkpoint write that has finished (cheap when there is none)."""
        if self._writer is not None and not self._writer.is_alive():
            self.finish()

    def finish(self) -> None:
        """Wait for a checkpoint being written in the background; raise its failure."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.join()
        error, self._error = self._error, None
        result, self._result = self._result, None
        if error is not None:
            raise RecoveryError(f"writing a checkpoint: {type(error).__name__}: {error}") from error
        if result is not None:
            self._written(result)

    def _written(self, snapshot: Snapshot) -> None:
        self.written.append(snapshot)
        if (self.bindings or self.floors) and self.store is not None:
            oldest = self.store.oldest_offsets()
            if oldest is not None:
                for topic, bindings in self.bindings.items():
                    bindings.compact(oldest.get(topic, {}))
                for topic, floors in self.floors.items():
                    floors.compact(oldest.get(topic, {}))
