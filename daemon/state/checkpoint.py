"""Checkpoints: the worker's input collections written as snapshots at epoch boundaries.

A checkpoint is a `snapshot` whose frontier ``F`` is the upper bound of the epoch just published:
per input, the collection accumulated over every time ``< F`` (`InputState.records` and
``counts``, as the engine holds the input at ``F``), the updates already read at times ``>= F``
(`InputState.pending`), and the next offset of every input partition. Restoring it and replaying the inputs from those
offsets rebuilds exactly the state the worker had, so the recomputed outputs equal the ones
published before the crash (which the sink then does not publish again).

A `CheckpointStore` owns one directory: checkpoints are named ``checkpoint-<sequence>``, written
atomically (see `snapshot`), and only the newest ``keep`` valid ones are kept. `latest` returns
the newest one whose manifest and files check out; a torn or corrupt one is refused with the
reason logged, and the one before it is used instead. Refused checkpoints never count against
``keep``, so pruning never removes the newest valid checkpoint or the valid ones before it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import OptionsError, SnapshotError
from .snapshot import Column, Snapshot, SnapshotWriter

__all__ = ["InputState", "CheckpointStore", "CHECKPOINT_PREFIX"]

log = logging.getLogger("ddflow.daemon.state.checkpoint")

CHECKPOINT_PREFIX = "checkpoint-"
_NAME = re.compile(r"^checkpoint-(\d{10})$")

Update = tuple[Any, int, int]


class InputState:
    """One input's collection as a checkpoint holds it: ``records`` with their ``counts`` (the
    collection accumulated below the frontier, each record once, counts non-zero int64s) and
    ``pending`` updates at times not yet complete. A worker reads it from the engine
    (`ddflow.operators.input.InputState.read`) when a checkpoint is due."""

    def __init__(self, records: Sequence[Any] = (), counts: Any = None,
                 pending: Iterable[Update] = ()) -> None:
        self.records = list(records)
        self.counts = np.asarray(counts if counts is not None else [], dtype=np.int64)
        if len(self.counts) != len(self.records):
            raise OptionsError(f"InputState: {len(self.records)} records, {len(self.counts)} counts")
        self.pending: list[Update] = list(pending)

    @classmethod
    def of(cls, base: Mapping[Any, int], pending: Iterable[Update] = ()) -> InputState:
        """The state of record -> count ``base`` (zero counts left out) and ``pending`` updates."""
        kept = {r: c for r, c in base.items() if c}
        return cls(list(kept), list(kept.values()), pending)

    @property
    def base(self) -> dict[Any, int]:
        """record -> count (built on each call)."""
        return dict(zip(self.records, self.counts.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.records)


class CheckpointStore:
    """The checkpoints of one worker in ``directory``: write, prune to ``keep``, find the newest valid."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3, shards: int = 4) -> None:
        if type(keep) is not int or keep < 1:
            raise OptionsError(f"checkpoint keep: expected an int >= 1, got {keep!r}")
        if type(shards) is not int or shards < 1:
            raise OptionsError(f"checkpoint shards: expected an int >= 1, got {shards!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.shards = shards
        self.refused: list[tuple[Path, str]] = []  # (checkpoint, why) found torn or corrupt by `latest`
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OptionsError(f"checkpoint directory {self.directory}: cannot create it ({exc})") from exc
        self._remove_staging()

    def _remove_staging(self) -> None:
        """Temporary directories of writes a crash interrupted (never renamed into place)."""
        for path in self.directory.glob(f".{CHECKPOINT_PREFIX}*.tmp-*"):
            log.info("removing %s: an interrupted checkpoint write", path)
            shutil.rmtree(path, ignore_errors=True)

    def checkpoints(self) -> list[Path]:
        """Checkpoint directories, oldest first."""
        return sorted(p for p in self.directory.iterdir() if _NAME.match(p.name) and p.is_dir())

    def latest(self) -> Snapshot | None:
        """The newest checkpoint whose manifest and files check out (None if there is none).
        Each refused one is logged with its reason and listed in ``refused``."""
        self.refused = []
        for path in reversed(self.checkpoints()):
            try:
                snapshot = Snapshot.open(path)
                snapshot.verify()
            except SnapshotError as exc:
                self.refused.append((path, str(exc)))
                log.error("refusing checkpoint %s: %s; falling back to the one before", path.name, exc)
                continue
            if self.refused:
                log.warning("restoring %s after refusing %d newer checkpoint(s)", path.name, len(self.refused))
            return snapshot
        if self.refused:
            log.error("no valid checkpoint in %s (refused %d): replaying the inputs from the beginning",
                      self.directory, len(self.refused))
        return None

    def opened(self) -> list[Snapshot]:
        """The checkpoints whose manifest checks out, newest first, their files not read yet (verify
        the one to restore: `Snapshot.verify`); one whose manifest does not is logged and left out."""
        found = []
        for path in reversed(self.checkpoints()):
            try:
                found.append(Snapshot.open(path))
            except SnapshotError as exc:
                log.error("refusing checkpoint %s: %s", path.name, exc)
        return found

    def remove(self, path: Path, why: str) -> None:
        """Remove checkpoint ``path``, logging ``why``."""
        log.warning("removing checkpoint %s: %s", path.name, why)
        shutil.rmtree(path, ignore_errors=True)

    def write(
        self,
        frontier: int,
        inputs: Sequence[tuple[str, str, Sequence[Column], InputState, Mapping[int, int]]],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Write a checkpoint at ``frontier`` from (name, topic, columns, state, offsets) per input,
        then drop all but the newest ``keep``. Returns the new checkpoint."""
        existing = self.checkpoints()
        sequence = int(_NAME.match(existing[-1].name).group(1)) + 1 if existing else 1  # type: ignore[union-attr]
        started = time.perf_counter()
        writer = SnapshotWriter(self.directory / f"{CHECKPOINT_PREFIX}{sequence:010d}", frontier,
                                shards=self.shards, origin="checkpoint")
        with writer:
            for name, topic, columns, state, offsets in inputs:
                writer.add_input(name, topic, columns, state.records, state.pending, offsets, counts=state.counts)
            path = writer.commit(extra)
        snapshot = Snapshot.open(path)
        contents = ", ".join(f"{e.name}: {e.base_rows} records + {e.pending_rows} pending"
                             for e in snapshot.inputs.values())
        log.info("checkpoint %s at frontier %d: %d bytes, %s, in %.3f s", path.name, frontier, snapshot.size_bytes,
                 contents, time.perf_counter() - started)
        self.prune()
        return snapshot

    def prune(self) -> list[Path]:
        """Keep the newest ``keep`` checkpoints that `latest` did not refuse and remove every
        checkpoint older than the oldest of them; returns the removed ones.

        Refused checkpoints never count against ``keep`` (counting them once left only corrupt
        checkpoints after a few corruptions, and a restart replayed everything): the newest valid
        checkpoint is never removed, nor the ``keep - 1`` valid ones before it. A refused one
        newer than the oldest kept checkpoint stays for inspection until it falls behind."""
        refused = {path for path, _ in self.refused}
        checkpoints = self.checkpoints()
        valid = [p for p in checkpoints if p not in refused]
        if not valid:
            return []
        oldest_kept = valid[-self.keep:][0]
        removed = [p for p in checkpoints if p < oldest_kept]
        for path in removed:
            if path in refused:
                log.info("removing refused checkpoint %s: older than every kept valid one", path.name)
            shutil.rmtree(path, ignore_errors=True)
        self.refused = [(p, why) for p, why in self.refused if p not in removed]
        return removed

    def oldest_offsets(self) -> dict[str, dict[int, int]] | None:
        """Per topic, the smallest offsets a restore from any kept checkpoint resumes at (what the
        reclock bindings must still cover). None when some kept checkpoint is unreadable."""
        recorded: list[dict[str, dict[int, int]]] = []
        refused = {path for path, _ in self.refused}  # never restored: they need no bindings
        for path in self.checkpoints():
            if path in refused:
                continue
            try:
                manifest = Snapshot.open(path).manifest
            except SnapshotError:
                return None
            recorded.append({e.topic: dict(e.offsets or {}) for e in manifest.inputs.values()})
        floors: dict[str, dict[int, int]] = {}
        for topic in {t for offsets in recorded for t in offsets}:
            partitions = {p for offsets in recorded for p in offsets.get(topic, {})}
            # a checkpoint without this topic or partition resumes it from offset 0
            floors[topic] = {p: min(offsets.get(topic, {}).get(p, 0) for offsets in recorded) for p in partitions}
        return floors
