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

A restarted worker rejoins the generation (see `exchange`) and replays it: its inputs from the
beginning, the agreements and the exchange steps as they were first decided and sent; it closes
each agreed epoch once its own inputs have caught up with it, and the sink publishes only what
its writer had not made final. The others wait for it, each wait bounded by ``wait_timeout``
(`exchange.ExchangeTimeout`: the worker exits 1 for its supervisor to restart it).

Stopping (SIGTERM): the worker says so in the next agreement; the epoch agreed there closes on
every worker and the stopping one leaves (the others wait for it to come back). A stopped worker
waits at most ``stop_grace`` seconds in an agreement for the others (they may be gone): then it
commits what it closed and exits (a restart replays from there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from .clock import EpochClock
from .exchange import Interrupted, KafkaTransport
from .stats import EpochReport
from .worker import Worker

__all__ = ["ClusterWorker"]

log = logging.getLogger("ddflow.daemon.cluster")


class ClusterWorker(Worker):
    """Worker ``index`` of ``count`` (see the module). Besides `Worker`'s arguments: the Kafka
    options of the exchange topics, their ``prefix`` and ``run`` tag (both stable across restarts:
    derived from the consumer group), ``wait_timeout`` (seconds a worker waits for the others at a
    step or agreement) and ``retry`` (seconds between agreements a worker starts while what it
    would say does not change)."""

    def __init__(self, *args: Any, index: int, count: int, kafka_options: Mapping[str, Any], prefix: str, run: str,
                 wait_timeout: float = 60.0, retry: float = 0.1, stop_grace: float = 5.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index, self.count = index, count
        self.kafka_options = dict(kafka_options)
        self.prefix, self.run_tag = prefix, run
        self.wait_timeout, self.retry = wait_timeout, retry
        self.transport: KafkaTransport | None = None
        self.clock: EpochClock | None = None
        self._agreed: int | None = None  # an epoch the workers agreed on, not closed here yet
        self._interrupted = False  # a stop ended a wait: no more agreements from this process
        self.stop_grace = stop_grace
        self._stop_at: float | None = None
        self._departed: set[int] = set()  # workers that said they stop (no epoch is agreed without them)

    def stop(self) -> None:
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        super().stop()

    def _give_up(self) -> bool:
        """Whether a wait in an agreement ends: stopped ``stop_grace`` seconds ago (the others had
        that long to agree on a last epoch with this one)."""
        return self._stop_at is not None and time.monotonic() - self._stop_at > self.stop_grace

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
        from ..operators.workers import worker_dataflow

        transport = KafkaTransport(self.count, self.index, self.kafka_options, prefix=self.prefix, run=self.run_tag,
                                   timeout=self.wait_timeout, stop=self._give_up)
        try:
            self._doing(f"joining the workers' generation (worker {self.index} of {self.count})")
            transport.join()
            df = worker_dataflow(self.index, self.count, transport)
        except BaseException:
            transport.close()
            raise
        self.transport = transport
        worker = df.worker
        self.clock = EpochClock(self.epoch_policy, agree=worker.agree, seq=lambda: worker.agreements,
                                voted=transport.voted, retry=self.retry)
        log.info("worker %d of %d: generation %s (agree topic from offset %d)", self.index, self.count,
                 transport.generation, transport.start)
        return df

    def exchange_summary(self) -> dict[str, float]:
        """What this worker's exchanges cost so far: ``steps`` (every exchange point's steps),
        ``wait_seconds`` (blocked in them for the others), ``updates_sent``/``updates_received``
        (updates that crossed to/from other workers) and ``agreements`` on epoch ends."""
        from ..operators.nodes.exchange import Exchange

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
                                   time.monotonic() - self._epoch_opened, full=full, stopping=force)
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
                return None
            self._agreed = decision.upper
        upper = self._agreed
        if self.source.holds_partitions and (frontier is None or frontier < upper):
            self._doing(f"epoch [{self.frontier}, {upper}) agreed: reading the inputs up to it")
            return None
        self._agreed = None
        return self._close_epoch(upper)

    def _before_run(self) -> None:
        self.source.persist()  # the other workers receive this epoch's updates during the run

    def _close_on_stop(self) -> EpochReport | None:
        if self._interrupted or (self._departed and self._agreed is None):
            return None  # a worker that left cannot agree on a last epoch: leave without one
        report = self._maybe_close(force=True)
        while self._agreed is not None and not self._interrupted:  # an agreed epoch its inputs have not reached
            report = self.step() or report
        return report
