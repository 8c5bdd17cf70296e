"""One worker of several: a `Worker` whose dataflow is worker ``i`` of ``W``, its epochs agreed with the others.

``W`` daemons (``ddflow run`` with ``[workers] count = W``, each its own ``index``) share one
dataflow: worker ``i`` reads the input partitions ``p % W == i`` (`source.KafkaSource`), builds the
same graph as ``worker_dataflow(i, W, transport)``, whose exchanges route every update to the
worker owning its key and whose agreements are votes of every worker (the transport: the mesh,
`mesh_member.MeshWorker`, which builds it), and publishes the output records it holds as writer
``i`` of ``W`` (`sink.KafkaSink`). Epochs close at the same boundaries on every worker (`clock`):
at each epoch close the workers agree on the upper, each advances its inputs to it (updates beyond
it wait for the next epoch, held by the engine) and runs its dataflow once. A worker with nothing
to do still takes part in every agreement and every exchange step. `ClusterWorker` is that common
part; how the workers meet, checkpoint and restore is `MeshWorker`'s.

Stopping (SIGTERM): the worker says so in the next agreement; the epoch agreed there closes on
every worker and the stopping one leaves. A stopped worker waits at most ``stop_grace`` seconds in
an agreement for the others (they may be gone): then it commits what it closed and exits.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..observe.stats import EpochReport
from ..state.snapshot import Snapshot
from ..worker import Worker
from .clock import EpochClock
from .mesh import Interrupted

__all__ = ["ClusterWorker"]

log = logging.getLogger("ddflow.daemon.cluster.member")


class ClusterWorker(Worker):
    """Worker ``index`` of ``count`` (see the module). Besides `Worker`'s arguments: ``run`` (what
    the workers of one deployment share: derived from the consumer group), ``wait_timeout`` (seconds
    a worker waits for the others to start), ``retry`` (seconds between agreements a worker starts
    while what it would say does not change) and ``stop_grace``. A subclass builds the dataflow
    and its transport (`_new_dataflow`, setting ``transport``, ``clock`` and the snapshot to
    restore, ``_snapshot``) and says when a checkpoint is due (`_checkpoint_due`)."""

    def __init__(self, *args: Any, index: int, count: int, run: str, wait_timeout: float = 60.0, retry: float = 0.1,
                 stop_grace: float = 5.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index, self.count = index, count
        self.run_tag = run
        self.wait_timeout, self.retry = wait_timeout, retry
        self.transport: Any = None
        self.clock: EpochClock | None = None
        self._agreed: int | None = None  # an epoch the workers agreed on, not closed here yet
        self._checkpoint_at: int | None = None  # an agreed epoch the workers agreed to checkpoint
        self._interrupted = False  # a stop ended a wait: no more agreements from this process
        self.stop_grace = stop_grace
        self._stop_at: float | None = None
        self._departed: set[int] = set()  # workers that said they stop (no epoch is agreed without them)
        self._snapshot: Any = None  # the checkpoint or snapshot to restore, as the workers agreed

    def stop(self) -> None:
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        super().stop()

    def _give_up(self) -> bool:
        """Whether a wait in an agreement ends: stopped ``stop_grace`` seconds ago (the others had
        that long to agree on a last epoch with this one), or at once while opening (nothing is
        published yet: there is no last epoch to agree on)."""
        return self._stop_at is not None and (not self._open or time.monotonic() - self._stop_at > self.stop_grace)

    @property
    def waiting(self) -> tuple[tuple[int, ...], float] | None:
        """``(workers, seconds)``: the workers this one is blocked on now and for how long it has
        waited (None when it is not waiting)."""
        transport = self.transport
        since = None if transport is None else transport.waiting_since
        if since is None or transport is None:
            return None
        return transport.waiting_on, time.monotonic() - since

    def _origin(self) -> str | None:
        """What this worker starts from when the workers have no checkpoint in common: the identity
        of its ``--snapshot-from`` snapshot (`Snapshot.identity`), None for empty inputs."""
        recovery = self.recovery
        if recovery is None or recovery.snapshot_from is None:
            return None
        return Snapshot.open(recovery.snapshot_from).identity

    def _choose_snapshot(self) -> Any:
        return self._snapshot  # agreed with the other workers when the dataflow was built

    def exchange_summary(self) -> dict[str, float]:
        """What this worker's exchanges cost so far: ``steps`` (every exchange point's steps),
        ``wait_seconds`` (blocked in them for the others), ``updates_sent``/``updates_received``
        (updates that crossed to/from other workers), ``agreements`` on epoch ends and
        ``p99_wait_seconds``, the 99th percentile of the latest steps' waits (0 before any step)."""
        from ...operators.nodes.exchange import Exchange

        nodes = [n for n in self.dataflow._all_nodes() if isinstance(n, Exchange)] if self.dataflow else []
        worker = self.dataflow.worker if self.dataflow is not None else None
        p99 = worker.waits.percentile(99) if worker is not None else None
        return {"steps": sum(n.seq for n in nodes), "wait_seconds": sum(n.wait_seconds for n in nodes),
                "updates_sent": sum(n.sent for n in nodes), "updates_received": sum(n.received for n in nodes),
                "agreements": 0 if self.clock is None else self.clock.agreements, "p99_wait_seconds": p99 or 0.0}

    def close(self) -> None:
        if self._open and self.dataflow is not None:
            s = self.exchange_summary()
            log.info("worker %d of %d: %d exchange steps, mean wait %.0f us per step (p99 %.0f us), %d updates "
                     "sent and %d received, %d epoch agreements", self.index, self.count, s["steps"],
                     1e6 * s["wait_seconds"] / max(s["steps"], 1), 1e6 * s["p99_wait_seconds"], s["updates_sent"],
                     s["updates_received"], s["agreements"])
        try:
            super().close()
        finally:
            transport, self.transport = self.transport, None
            if transport is not None:
                transport.close()

    def _maybe_close(self, *, force: bool, full: bool = False) -> EpochReport | None:
        """Agree on the epoch's end with the other workers (`clock`), then close it once this
        worker's inputs reached it."""
        frontier = self.source.frontier()
        self.stats.input_frontier = frontier
        if self._agreed is None:
            if self._interrupted or self.clock is None:
                return None
            vote = EpochClock.vote(frontier, self.source.holds_partitions, self._epoch_records,
                                   time.monotonic() - self._epoch_opened, full=full, stopping=force,
                                   checkpoint=self._checkpoint_due(stopping=force))
            assert self.transport is not None
            self.transport.interruptible = True
            try:
                decision = self.clock.next_upper(self.frontier, vote)
            except Interrupted as exc:
                self._interrupted = True
                log.warning("%s: worker %d stops without that agreement", exc, self.index)
                return None
            finally:
                self.transport.interruptible = False
            if decision is None:
                return None
            self._departed = {w for w in decision.stopping if w != self.index}  # the latest agreement's
            if decision.upper is None:
                if decision.checkpoint and self.recovery is not None:  # a worker stops: the frontier they are at
                    self._checkpoint_at = self.frontier
                    self._checkpoint(self.frontier, force=False)
                return None
            self._agreed = decision.upper
            self._checkpoint_at = decision.upper if decision.checkpoint else None
        upper = self._agreed
        if self.source.holds_partitions and (frontier is None or frontier < upper):
            self._doing(f"epoch [{self.frontier}, {upper}) agreed: reading the inputs up to it")
            return None
        self._agreed = None
        return self._close_epoch(upper)

    def _checkpoint_due(self, *, stopping: bool) -> bool:
        """What this worker's vote says of a checkpoint: whether one is due (see the subclass)."""
        return False

    def _before_run(self) -> None:
        self.source.persist()  # the other workers receive this epoch's updates during the run (see Worker's)

    def _close_on_stop(self) -> EpochReport | None:
        if self._interrupted or (self._departed and self._agreed is None):
            return None  # a worker that left cannot agree on a last epoch: leave without one
        report = self._maybe_close(force=True)
        while self._agreed is not None and not self._interrupted:  # an agreed epoch its inputs have not reached
            report = self.step() or report
        return report
