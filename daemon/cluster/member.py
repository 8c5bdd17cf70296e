"""One worker of several: a `Worker` whose dataflow is worker ``i`` of ``W`` over exchange topics.

``W`` daemons (``ddflow run`` with ``[workers] count = W``, each its own ``index``) share one
dataflow: worker ``i`` reads the input partitions ``p % W == i`` (`source.KafkaSource`), builds the
same graph as ``worker_dataflow(i, W, KafkaTransport(...))``, whose exchanges route every update to
the worker owning its key over the topics ``ddflow-{group_id}-exchange-{c}`` and agree over
``ddflow-{group_id}-agree`` (`exchange`), and publishes the output records it holds as writer ``i``
of ``W`` (`sink.KafkaSink`). Epochs close at the same boundaries on every worker (`clock`): at each
epoch close the workers agree on the upper, each advances its inputs to it (updates beyond it
wait for the next epoch, held by the engine) and runs its dataflow once. A worker with nothing to
do still takes part in every agreement and every exchange step.

A restarted worker rejoins the generation (see `exchange`). With a checkpoint of it (each worker
keeps its own, under ``<checkpoint.location>/worker-<i>``) it restores alone, the others running on:
its inputs as a single worker does, and what each exchange point held at the checkpoint's frontier
``F`` (the keys it owns there, entries ``exchange:<c>`` of the checkpoint), in one run that makes
no agreement and exchanges nothing (``operators.workers.Worker.restore``); then it takes its place
in the common sequence back (agreements and exchange steps counted as at ``F``) and re-reads its
inputs, the agree topic and its exchange partitions from the offsets the checkpoint recorded.
Without one it replays the generation from its start. Either way it takes every agreement and
exchange step as first decided and sent, closes each agreed epoch once its own inputs have caught
up with it, and its sink publishes only what its writer had not made final. The others wait for
it, each wait bounded by ``wait_timeout`` (`exchange.ExchangeTimeout`: the worker exits 1 for its
supervisor to restart it).

Stopping (SIGTERM): the worker says so in the next agreement; the epoch agreed there closes on
every worker and the stopping one leaves (the others wait for it to come back). A stopped worker
waits at most ``stop_grace`` seconds in an agreement for the others (they may be gone): then it
commits what it closed and exits (a restart replays from there).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import SnapshotError
from ..observe.stats import EpochReport
from ..state.checkpoint import InputState
from ..state.recovery import INTERNAL
from ..state.snapshot import Snapshot
from ..worker import Worker
from .clock import EpochClock
from .mesh import Interrupted as MeshInterrupted
from .transport import Interrupted, KafkaTransport, UNKNOWN

GENERATION_FILE = "generation.json"

__all__ = ["ClusterWorker"]

log = logging.getLogger("ddflow.daemon.cluster.member")


def _named(origin: str | None) -> str:
    return "empty inputs (no snapshot)" if origin is None else f"snapshot {origin}"


class ClusterWorker(Worker):
    """Worker ``index`` of ``count`` (see the module). Besides `Worker`'s arguments: the Kafka
    options of the exchange topics, their ``prefix`` and ``run`` tag (both stable across restarts:
    derived from the consumer group), ``wait_timeout`` (seconds a worker waits for the others at a
    step or agreement) and ``retry`` (seconds between agreements a worker starts while what it
    would say does not change)."""

    def __init__(self, *args: Any, index: int, count: int, kafka_options: Mapping[str, Any], prefix: str, run: str,
                 wait_timeout: float = 60.0, retry: float = 0.1, stop_grace: float = 5.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index, self.count = index, count
        self.kafka_options = dict(kafka_options)
        self.prefix, self.run_tag = prefix, run
        self.wait_timeout, self.retry = wait_timeout, retry
        self.transport: KafkaTransport | None = None
        self.clock: EpochClock | None = None
        self._agreed: int | None = None  # an epoch the workers agreed on, not closed here yet
        self._checkpoint_at: int | None = None  # an agreed epoch the workers agreed to checkpoint
        self._interrupted = False  # a stop ended a wait: no more agreements from this process
        self.stop_grace = stop_grace
        self._stop_at: float | None = None
        self._departed: set[int] = set()  # workers that said they stop (no epoch is agreed without them)
        self._snapshot: Any = None  # the checkpoint to restore (of the generation the workers are in)
        self._position: dict[str, Any] | None = None  # its place in the common sequence

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

    def _new_dataflow(self) -> Any:
        from ...operators.workers import worker_dataflow

        recovery = self.recovery
        snapshot = recovery.choose() if recovery is not None else None
        shared = recovery is not None and recovery.shared(snapshot)  # a backfill: every worker its share
        recorded = None if snapshot is None or shared else snapshot.manifest.extra.get("cluster")
        known = self._generation_file()
        own = self._origin()
        transport = KafkaTransport(self.count, self.index, self.kafka_options, prefix=self.prefix, run=self.run_tag,
                                   timeout=self.wait_timeout, stop=self._give_up)
        try:
            self._doing(f"joining the workers' generation (worker {self.index} of {self.count})")
            if recorded is not None:
                resume = transport.join(recorded["generation"], start=recorded["start"],
                                        agree_offset=recorded["agree_offset"],
                                        exchange_offsets={int(c): o for c, o in recorded["exchange_offsets"].items()},
                                        origin=recorded.get("origin", UNKNOWN))
            else:
                generation, start, origin = known or (None, None, own)
                resume = transport.join(generation, start=start, origin=origin)
            if not resume and transport.origin not in (UNKNOWN, own):
                raise SnapshotError(
                    f"worker {self.index} of {self.count} replays generation {transport.generation} from its start "
                    f"(it has no checkpoint of it), which began from {_named(transport.origin)}; this worker would "
                    f"start from {_named(own)}: start every worker with the same --snapshot-from")
            df = worker_dataflow(self.index, self.count, transport)
        except BaseException:
            transport.close()
            raise
        if snapshot is not None and not resume and not shared:
            assert recovery is not None
            try:
                named = recovery.named()  # the generation starts from it (if it was given), else empty
            except BaseException:
                transport.close()
                raise
            log.warning("%s belongs to generation %s; the workers are in generation %s: worker %d replays it from "
                        "%s", snapshot, None if recorded is None else recorded["generation"], transport.generation,
                        self.index, "the start" if named is None else named)
            snapshot = named
        self._snapshot = snapshot
        self._position = None if snapshot is None or recovery is None or recovery.shared(snapshot) else recorded
        self._generation_file(transport.generation, transport.start, transport.origin)
        if self.recovery is not None and self.recovery.enabled:
            self.recovery.more = self._exchange_entries
        self.transport = transport
        worker = df.worker
        self.clock = EpochClock(self.epoch_policy, agree=worker.agree, seq=lambda: worker.agreements,
                                voted=transport.voted, retry=self.retry)
        log.info("worker %d of %d: generation %s (agree topic from offset %d)", self.index, self.count,
                 transport.generation, transport.start)
        return df

    def _generation_file(self, generation: str | None = None, start: int | None = None,
                         origin: Any = UNKNOWN) -> tuple[str, int, Any] | None:
        """The generation this worker was last in and what it started from, kept beside its
        checkpoints (so that worker 0 restarted before its first checkpoint continues the
        generation instead of starting a new one); with arguments, record them. None without a
        checkpoint directory or record."""
        store = None if self.recovery is None else self.recovery.store
        if store is None:
            return None
        path = Path(store.directory) / GENERATION_FILE
        if generation is not None:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"generation": generation, "start": start, "origin": origin}))
            os.replace(tmp, path)
            return generation, int(start or 0), origin
        try:
            known = json.loads(path.read_text())
            return str(known["generation"]), int(known["start"]), known.get("origin", UNKNOWN)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _origin(self) -> str | None:
        """What this worker starts a generation from when it has no checkpoint of it: the identity
        of its ``--snapshot-from`` snapshot (`Snapshot.identity`), None for empty inputs."""
        recovery = self.recovery
        if recovery is None or recovery.snapshot_from is None:
            return None
        return Snapshot.open(recovery.snapshot_from).identity

    def _choose_snapshot(self) -> Any:
        return self._snapshot  # decided when joining the generation (a checkpoint of another one is not restored)

    def _checkpoint_extra(self) -> dict[str, Any]:
        """Besides `Worker`'s: the generation, this worker's place in the common sequence and where
        its exchange and agree topics are to be re-read from (see ``exchange.KafkaTransport.join``)."""
        extra = super()._checkpoint_extra()
        assert self.transport is not None and self.dataflow is not None
        position = self.dataflow.worker.position()
        where = self.transport.positions()
        extra["cluster"] = {"generation": self.transport.generation, "start": self.transport.start,
                            "agreements": position["agreements"], "steps": position["steps"],
                            "upper": position["upper"], "agree_offset": where["agree"], "origin": self.transport.origin,
                            "exchange_offsets": {str(c): o for c, o in where["exchange"].items()}}
        return extra

    def _exchange_entries(self, frontier: int) -> list[tuple[str, str, Any, InputState, dict[int, int]]]:
        """What each exchange point holds (the keys this worker owns there), as checkpoint entries
        ``exchange:<c>`` of rows ``(record, loop rounds)`` at ``frontier - 1`` with their counts."""
        from ..state.shards import columns_for_fields

        df = self.dataflow
        entries = []
        columns = columns_for_fields(["record", "rounds"])
        for channel, (ids, times, diffs) in enumerate(df.worker.states(frontier)):
            rounds = [tuple(t) for t in times[:, 1:].tolist()]
            rows = list(zip(df.interner.value_list(ids), rounds))
            entries.append((f"{INTERNAL}{channel}", f"{self.prefix}-exchange-{channel}", columns,
                            InputState(rows, diffs), {}))
        return entries

    def _finish_loading(self) -> EpochReport:
        """Restore alone (see the module): the inputs as `Worker` does, what each exchange point
        held, then back in the common sequence where the checkpoint left it. A shared snapshot (a
        backfill): this worker's share of the inputs, then the epoch up to its frontier is the
        first one every worker closes (its run exchanges as any other)."""
        if self._position is None:
            return super()._finish_loading()
        assert self._loading is not None and self.transport is not None
        loaded = self._loading.result()  # the loader keeps this dict: the inputs stay for `Worker`
        frontier = self._loading.snapshot.frontier
        worker = self.dataflow.worker
        held = {name: loaded.pop(name) for name in [n for n in loaded if n.startswith(INTERNAL)]}
        unknown = sorted(set(held) - {f"{INTERNAL}{c}" for c in range(len(worker.exchanges))})
        if unknown:
            raise SnapshotError(f"{self._loading.snapshot}: it holds {unknown}; this dataflow has "
                                f"{len(worker.exchanges)} exchange points")
        states = []
        for channel, node in enumerate(worker.exchanges):
            entry = held.get(f"{INTERNAL}{channel}")
            base = [] if entry is None else entry[0].rows()  # ((record, rounds), time, count)
            ids = self.dataflow.interner.ids([row[0] for row, _, _ in base])
            times = np.asarray([(frontier - 1, *row[1]) for row, _, _ in base], dtype=np.int64)
            states.append((ids, times.reshape(len(base), node.scope.depth),
                           np.asarray([d for _, _, d in base], dtype=np.int64)))
        worker.restore(states)
        try:
            report = super()._finish_loading()
        finally:
            worker.restoring = False
        position = self._position
        worker.resume(position)
        self.transport.resume(int(position["agreements"]), [int(s) for s in position["steps"]])
        log.info("worker %d restored at frontier %d: %d exchange points' state, agreement %d", self.index,
                 frontier, len(states), position["agreements"])
        return report

    def exchange_summary(self) -> dict[str, float]:
        """What this worker's exchanges cost so far: ``steps`` (every exchange point's steps),
        ``wait_seconds`` (blocked in them for the others), ``updates_sent``/``updates_received``
        (updates that crossed to/from other workers) and ``agreements`` on epoch ends."""
        from ...operators.nodes.exchange import Exchange

        nodes = [n for n in self.dataflow._all_nodes() if isinstance(n, Exchange)] if self.dataflow else []
        return {"steps": sum(n.seq for n in nodes), "wait_seconds": sum(n.wait_seconds for n in nodes),
                "updates_sent": sum(n.sent for n in nodes), "updates_received": sum(n.received for n in nodes),
                "agreements": 0 if self.clock is None else self.clock.agreements}

    def close(self) -> None:
        if self._open and self.dataflow is not None:
            s = self.exchange_summary()
            log.info("worker %d of %d: %d exchange steps, mean wait %.0f us per step, %d updates sent and %d "
                     "received, %d epoch agreements", self.index, self.count, s["steps"],
                     1e6 * s["wait_seconds"] / max(s["steps"], 1), s["updates_sent"], s["updates_received"],
                     s["agreements"])
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
            except (Interrupted, MeshInterrupted) as exc:
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
        """What this worker's vote says of a checkpoint (over the exchange topics each worker
        checkpoints on its own interval: nothing)."""
        return False

    def _before_run(self) -> None:
        self.source.persist()  # the other workers receive this epoch's updates during the run

    def _close_on_stop(self) -> EpochReport | None:
        if self._interrupted or (self._departed and self._agreed is None):
            return None  # a worker that left cannot agree on a last epoch: leave without one
        report = self._maybe_close(force=True)
        while self._agreed is not None and not self._interrupted:  # an agreed epoch its inputs have not reached
            report = self.step() or report
        return report
