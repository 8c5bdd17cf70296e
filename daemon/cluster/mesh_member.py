"""One worker of several over the mesh: checkpoints at frontiers every worker agrees on, restored together.

`MeshWorker` is a `member.ClusterWorker` whose exchanges and agreements travel over the mesh
(`mesh.MeshTransport`, ``[workers] addresses``, by default sockets of this host:
`identity.mesh_addresses`). The mesh keeps no history: when a worker fails the others find it lost
and stop, and every worker restarts (as its supervisor restarts it) from the same point.

**Checkpoints** (``checkpoint.location``): each worker keeps its own under
``<location>/worker-<i>``: its input partitions' collections and offsets and its result positions,
as a single worker's (no exchange state: every worker restarts, so the first run after a restore
rebuilds what each exchange point holds from the restored inputs). When to take one rides the epoch
clock (`clock`): a worker's vote says whether a checkpoint is due (its ``interval`` passed since the
last, or it stops), and an epoch whose agreement had one due is checkpointed by every worker at its
upper ``F``, in the background. A frontier is complete when every worker holds a valid checkpoint
of it; its manifest says which worker of how many wrote it (``extra["mesh"]``). A worker is at most
one checkpoint ahead of another (each finishes its write before it starts the next, and no epoch
closes without all), so each keeps at least two (``checkpoint.keep = 1`` is raised to 2): killed
while one is written, every worker still holds the one before.

**Restore**: before its first epoch, every worker takes part in the same agreements (even without
a checkpoint directory, so that they stay numbered alike): each votes the frontiers of its
checkpoints of this layout (worker ``i`` of ``W``) and what it would start from otherwise (its
``--snapshot-from`` snapshot's identity, or none); all take the newest frontier every worker holds,
each verifies its own checkpoint of it and a second vote confirms (a worker whose checkpoint is
corrupt says so: that frontier is dropped by all and they choose again). Checkpoints of a frontier
not every worker completed (newer than the chosen one, or all of them when there is none) are
removed: the run they belong to is over. Then each worker loads its checkpoint, resumes its input
partitions at its offsets, and the epoch up to ``F`` is the first one every worker closes (its run
exchanges as any other); the sink does not publish again what the result topics already hold
(the positions the checkpoint recorded). Without a complete checkpoint, the workers start from the
``--snapshot-from`` snapshot, each loading the keys it owns (every worker must be given the same),
else from empty inputs, and replay their inputs from the beginning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..exceptions import SnapshotError, WorkerError
from ..state.snapshot import Snapshot
from .clock import EpochClock
from .member import ClusterWorker

__all__ = ["MeshWorker", "agree_on_checkpoint"]

log = logging.getLogger("ddflow.daemon.cluster.mesh_member")


def agree_on_checkpoint(agree: Callable[[Any], list[Any]], candidates: Mapping[int, Snapshot], origin: str | None,
                        *, who: str = "this worker") -> int | None:
    """The newest frontier of which every worker holds a valid checkpoint, None when there is none.
    ``agree(value) -> [every worker's value]`` is one agreement (every worker calls this function
    at the same point); ``candidates``: this worker's checkpoints by frontier (manifests opened,
    files not read yet); ``origin``: what this worker starts from without a checkpoint (its
    ``--snapshot-from`` snapshot's identity, or None), which must then be the same everywhere
    (`SnapshotError` otherwise, on every worker). Each worker verifies its checkpoint of the
    frontier the votes give and a second agreement confirms: when some worker's is corrupt, every
    worker drops that frontier and they choose again."""
    dropped: set[int] = set()
    while True:
        votes = agree([sorted(set(candidates) - dropped), origin])
        common = set.intersection(*(set(v[0]) for v in votes)) - dropped
        chosen = max(common, default=None)
        if chosen is None:
            origins = sorted({"empty inputs" if v[1] is None else f"snapshot {v[1]}" for v in votes})
            if len(origins) > 1:
                raise SnapshotError(f"{who}: no checkpoint every worker completed, and the workers would start "
                                    f"from different inputs ({', '.join(origins)}): start every worker with the "
                                    f"same --snapshot-from")
            return None
        ok = True
        try:
            candidates[chosen].verify()
        except SnapshotError as exc:
            log.error("refusing checkpoint %s: %s", candidates[chosen].path.name, exc)
            ok = False
        if all(agree(ok)):
            return chosen
        dropped.add(chosen)
        log.warning("a worker refused its checkpoint at frontier %d: the workers choose again", chosen)


class MeshWorker(ClusterWorker):
    """Worker ``index`` of ``count`` over the mesh (see the module). Besides `ClusterWorker`'s
    arguments: ``addresses`` (one per worker) and ``peer_timeout`` (seconds of silence after which a
    peer is lost)."""

    def __init__(self, *args: Any, addresses: tuple[str, ...], peer_timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.addresses, self.peer_timeout = tuple(addresses), peer_timeout
        self._checkpointed: int | None = None  # the frontier of the last checkpoint every worker took or restored
        self.mesh: Any = None  # the mesh, kept once closed: the peers it found lost (`mesh.MeshTransport.lost`)
        store = None if self.recovery is None else self.recovery.store
        if store is not None and store.keep < 2:  # the one before a write a kill cut, which every worker holds
            log.info("mesh worker %d keeps 2 checkpoints, not checkpoint.keep = %d", self.index, store.keep)
            store.keep = 2

    def _new_dataflow(self) -> Any:
        from ...operators.workers import worker_dataflow
        from .mesh import MeshTransport

        transport = MeshTransport(self.addresses, self.index, run=self.run_tag, start_timeout=self.wait_timeout,
                                  peer_timeout=self.peer_timeout, stop=self._give_up)
        self._doing(f"meeting the other workers over the mesh (worker {self.index} of {self.count} at "
                    f"{self.addresses[self.index]})")
        log.info("worker %d of %d: waiting for the other workers over the mesh at %s, up to %g s "
                 "(workers.wait_timeout)", self.index, self.count, self.addresses[self.index], self.wait_timeout)
        transport.interruptible = True  # a stop while opening ends the start-up wait and the restore votes at once
        try:
            df = worker_dataflow(self.index, self.count, transport)
            self.transport = self.mesh = transport  # type: ignore[assignment]  (the same waits, stop and votes)
            self._snapshot = self._agree_on_restore(df.worker)
        except BaseException:
            self.transport = None
            transport.close()
            raise
        finally:
            transport.interruptible = False
        worker = df.worker
        self.clock = EpochClock(self.epoch_policy, agree=worker.agree, seq=lambda: worker.agreements,
                                voted=transport.voted, retry=self.retry)
        log.info("worker %d of %d: mesh at %s, peers %s", self.index, self.count, self.addresses[self.index],
                 [a for i, a in enumerate(self.addresses) if i != self.index])
        return df

    # -- restoring together ------------------------------------------------------------------------

    def _layout(self) -> dict[str, int]:
        return {"index": self.index, "workers": self.count}

    def _candidates(self) -> dict[int, Snapshot]:
        """This worker's checkpoints of its layout, by frontier (the newest of each frontier)."""
        store = None if self.recovery is None else self.recovery.store
        found: dict[int, Snapshot] = {}
        for snapshot in [] if store is None else store.opened():
            layout = snapshot.manifest.extra.get("mesh")
            if layout != self._layout():
                log.warning("checkpoint %s was not written by mesh worker %d of %d (%s): it is not restored",
                            snapshot.path.name, self.index, self.count, layout)
                continue
            found.setdefault(snapshot.frontier, snapshot)
        return found

    def _agree_on_restore(self, worker: Any) -> Snapshot | None:
        """The snapshot every worker restores (see the module), agreed over the mesh."""
        recovery = self.recovery
        candidates = self._candidates()
        who = f"worker {self.index} of {self.count}"
        chosen = agree_on_checkpoint(worker.agree, candidates, self._origin(), who=who)
        store = None if recovery is None else recovery.store
        for frontier, snapshot in sorted(candidates.items()):
            if store is not None and (chosen is None or frontier > chosen):
                store.remove(snapshot.path, f"frontier {frontier} is not one every worker completed (they restore "
                                            f"{'none' if chosen is None else chosen})")
        if chosen is None:
            snapshot = None if recovery is None else recovery.named()
            log.info("worker %d of %d: no checkpoint every worker completed; starting from %s", self.index, self.count,
                     "empty inputs" if snapshot is None else snapshot)
            return snapshot
        assert recovery is not None
        snapshot = candidates[chosen]
        recovery.check_fits(snapshot)
        recovery.restored = snapshot
        self._checkpointed = chosen
        log.info("worker %d of %d: restoring checkpoint %s at frontier %d, the newest every worker completed",
                 self.index, self.count, snapshot.path.name, chosen)
        return snapshot

    # -- checkpointing together --------------------------------------------------------------------

    def _checkpoint_due(self, *, stopping: bool) -> bool:
        recovery = self.recovery
        return recovery is not None and recovery.enabled and (stopping or recovery.due())

    def _checkpoint(self, upper: int, *, force: bool) -> None:
        """Checkpoint the epoch up to ``upper`` when the workers agreed to (a checkpoint this worker
        alone took would never be restored: not even on a stop)."""
        recovery = self.recovery
        assert recovery is not None
        if upper != self._checkpoint_at or upper == self._checkpointed:
            recovery.collect()
            return
        self._checkpoint_at, self._checkpointed = None, upper
        try:
            self.commit()  # a checkpoint never gets ahead of the published outputs
            recovery.checkpoint(upper, self.source.next_offsets(), wait=False, extra=self._checkpoint_extra())
        except Exception as exc:
            raise WorkerError(f"epoch up to {upper}: writing a checkpoint: {type(exc).__name__}: {exc}") from exc

    def _checkpoint_extra(self) -> dict[str, Any]:
        """A single worker's (`Worker._checkpoint_extra`) and this worker's layout (``mesh``)."""
        extra = super(ClusterWorker, self)._checkpoint_extra()
        extra["mesh"] = self._layout()
        return extra
