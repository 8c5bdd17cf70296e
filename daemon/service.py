"""The daemon as a service: one config -> the worker, its Prometheus metrics, its HTTP endpoints.

``Service`` is what ``ddflow run`` and ``ddflow demo`` run. It translates the validated
``ddflow.config.Config`` into the data path's specs (inputs, outputs, epoch policy, client
options with secrets resolved) through `factory.worker_from_config`; connects the worker's ``Stats`` to
``DaemonMetrics`` (counters read at scrape time, histograms fed per epoch); and answers the probes:
alive while the worker loop runs and makes progress, ready once the inputs are assigned and the
first epoch is published. ``stop()`` may be called from any thread (a signal handler): the worker
finishes the epoch in progress, so everything below the last published frontier is final; stopped
while it opens (waiting for the other workers at start-up), it stops at once: nothing is published yet.

The worker loop runs in a thread of its own and the calling thread supervises it, so that a loop
blocked where no Python code runs (inside a librdkafka call, a long engine step) can neither
silence the probes nor swallow SIGTERM: ``/healthz`` answers 503 once the loop has made no progress
for ``worker.stall_timeout`` (naming what it was doing), and once stopped (SIGTERM, or a topic the
worker watches changed) the loop gets ``worker.stop_timeout`` to finish; after that `run` raises
`StuckWorker` and the process must exit without the epoch (a restart resumes from what is final).

The broker is watched from a thread of its own (`kafka.liveness.BrokerWatch`): at start the
service waits for it up to ``kafka.connect_timeout`` (``/readyz`` failing, ``ddflow_broker_answering``
0), then raises `BrokerSilent` saying it is unreachable; while running, a broker silent for 3 s is
logged and fails ``/readyz``, and one silent for longer than ``kafka.transaction_timeout`` makes
`run` raise `BrokerSilent` while it is still away. A stop while the broker is silent does not wait
for it either (`BrokerSilent` at once: nothing could be published), and a sink fenced by another
instance with the same ``transactional.id`` raises `Fenced` as soon as it learns it. After each of
these the worker thread may be blocked in librdkafka: the caller should exit the process.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector

from ..config import Config
from ..operators.errors import TransportAborted
from .cluster.identity import worker_identity
from .exceptions import BrokerSilent, Fenced, Stopped, StuckWorker
from .formats.types import REASONS
from .kafka.liveness import BrokerWatch
from .observe.health import EndpointServer
from .observe.metrics import DaemonMetrics, snapshot_from_stats
from .observe.stats import Stats

__all__ = ["Service", "make_worker", "watch_broker"]

log = logging.getLogger("ddflow.daemon.service")

WAITING_UNREADY_S = 2.0  # a worker blocked this long on the others is not ready (exchange steps take ms)


class Service:
    """One daemon built from a ``Config``: the worker, its metrics, and the HTTP endpoints.

    ``run()`` blocks in the calling thread until ``stop()`` (any thread, e.g. a signal handler),
    ``timeout`` or a failure; ``stop()`` lets the worker finish the epoch in progress, so every
    time below the last published frontier is final on the result topics.
    """

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 snapshot_from: str | None = None) -> None:
        self.config = config
        self.snapshot_from = snapshot_from
        self.registry = registry if registry is not None else CollectorRegistry()
        if registry is None:  # the process's own: memory, CPU, open files (process_*), the collector's work (python_gc_*)
            ProcessCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self.stats = Stats()
        self.broker: BrokerWatch | None = None  # set by run
        index, count = worker_identity(config)
        self.metrics = DaemonMetrics(
            self.registry,
            inputs={i.name: i.late for i in config.inputs},
            outputs=[o.name for o in config.outputs],
            dead_letter_reasons=sorted(REASONS),
            worker=index,
            workers=count,
            broker=lambda: self.broker,
        )
        self.stats.on_epoch(self._on_epoch)
        self.worker: Any = None
        self.endpoints: Any = None
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._running = threading.Event()
        self._done = threading.Event()

    # -- probes and metrics ---------------------------------------------------------------------

    def _on_epoch(self, report: Any) -> None:
        latencies = [seconds for seconds, _ in report.latencies]
        counts = [count for _, count in report.latencies]
        self.metrics.observe_epoch(report.seconds, latencies, counts)

    def stalled(self) -> float | None:
        """Seconds the running worker loop has made no progress, if over ``worker.stall_timeout``."""
        worker = self.worker
        if worker is None or not self._running.is_set() or self._done.is_set() or not worker.assigned:
            return None  # opening (restoring a checkpoint, reading the result topics) is not a stall
        idle = time.monotonic() - worker.progressed
        return idle if idle > self.config.worker.stall_timeout_ns / 1e9 else None

    def alive(self) -> tuple[bool, str]:
        if self.failure is not None:
            return False, f"worker failed: {type(self.failure).__name__}: {self.failure}"
        if self._done.is_set():
            return False, "worker stopped"
        idle = self.stalled()
        if idle is not None:
            return False, (f"worker loop stalled: no progress for {idle:.0f} s (worker.stall_timeout "
                           f"{self.config.worker.stall_timeout_ns / 1e9:g} s) while {self.worker.activity}")
        return True, "worker running" if self._running.is_set() else "starting"

    def ready(self) -> tuple[bool, str]:
        lost = getattr(getattr(self.worker, "mesh", None), "lost", None)  # over the mesh (kept once it closed)
        if lost:
            return False, f"mesh peers lost: {', '.join(lost)} (every worker exits 1 and all restart)"
        broker = self.broker
        silent = None if broker is None or self._done.is_set() else broker.reason()
        if silent is not None:
            return False, silent
        if not self._running.is_set() or self.worker is None or self._done.is_set():
            return False, "worker not running"
        if not self.worker.assigned:
            return False, "input partitions not assigned yet"
        waiting = getattr(self.worker, "waiting", None)  # one worker of several, blocked on others
        if waiting is not None and waiting[0] and waiting[1] >= WAITING_UNREADY_S:
            return False, (f"waiting {waiting[1]:.0f} s for workers {list(waiting[0])} (they exit or restart; "
                           f"workers.wait_timeout {self.config.workers.wait_timeout_ns / 1e9:g} s)")
        if self.stats.epochs < 1:
            return False, "first epoch not completed yet"
        stalled = getattr(getattr(self.worker, "stalls", None), "reason", None)
        if stalled is not None:
            return False, f"output frontier stalled: {stalled}"
        return True, "ready"

    def snapshot(self) -> Any:
        exchange = getattr(self.worker, "transport", None) or getattr(self.worker, "mesh", None)  # (mesh: once closed)
        return snapshot_from_stats(self.stats, topics={i.name: i.topic for i in self.config.inputs},
                                   ready=self.ready()[0], exchange=exchange)

    def arrangements(self) -> Any:
        worker = self.worker
        dataflow = None if worker is None else getattr(worker, "dataflow", None)
        return None if dataflow is None else dataflow.arrangement_stats()

    def operators(self) -> Any:
        dataflow = getattr(self.worker, "dataflow", None)
        return None if dataflow is None else dataflow.operator_stats()

    # -- lifecycle ------------------------------------------------------------------------------

    def serve(self) -> Any:
        """Start the HTTP endpoints on ``metrics.address``; returns the server (``.url``)."""
        self.metrics.bind(self.snapshot, self.arrangements, self.operators)
        metrics = self.config.metrics
        self.endpoints = EndpointServer(self.registry, host=metrics.host, port=metrics.port,
                                        alive=self.alive, ready=self.ready, max_connections=metrics.max_connections,
                                        request_timeout=metrics.request_timeout_ns / 1e9)
        return self.endpoints

    def run(self, *, timeout: float | None = None) -> None:
        """Run the worker until stopped, ``timeout`` or a failure (raised here). Raises `StuckWorker`
        when a stopped worker loop did not finish within ``worker.stop_timeout``: its thread is left
        blocked, and the caller should exit the process."""
        try:
            self.broker = watch_broker(self.config)
            if self.broker is not None:
                self._wait_for_broker(self.broker)
                if self._stop.is_set():
                    return
                self.broker.start()
            self.worker = make_worker(self.config, self.stats, snapshot_from=self.snapshot_from)
            self.worker.stalls.after = self.config.worker.frontier_stall_timeout_ns / 1e9
            if self._stop.is_set():
                return
            self._running.set()
            errors: list[BaseException] = []
            thread = threading.Thread(target=self._work, args=(timeout, errors), name="ddflow-worker", daemon=True)
            thread.start()
            self._supervise(thread)
            if errors:
                raise errors[0]
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._done.set()
            if self.broker is not None:
                self.broker.close()

    def _wait_for_broker(self, broker: BrokerWatch) -> None:
        """Wait up to ``kafka.connect_timeout`` for the broker to answer, or for a stop."""
        limit, started = self.config.kafka.connect_timeout_ns / 1e9, time.monotonic()
        if broker.probe():
            return
        log.warning("waiting for the broker at %s (%s), up to %g s (kafka.connect_timeout)", broker.address,
                    broker.error, limit)
        if broker.wait(limit, self._stop):
            log.info("the broker at %s answers after %.1f s", broker.address,
                     time.monotonic() - started)
        elif not self._stop.is_set():
            raise BrokerSilent(f"the broker at {broker.address} is unreachable: {broker.error} (no answer within "
                               f"{limit:g} s, kafka.connect_timeout); is it running, and is kafka.bootstrap right?")

    def _work(self, timeout: float | None, errors: list[BaseException]) -> None:
        try:
            self.worker.run(timeout=timeout)
        except BaseException as exc:  # handed to run() in the supervising thread
            if isinstance(exc, (TransportAborted, Stopped)) and self._stop.is_set() and not self.worker.assigned:
                log.info("stopped while opening (%s): nothing was published", exc)  # a wait or a read ended
                return
            errors.append(exc)

    def _supervise(self, thread: threading.Thread) -> None:
        """Wait for the worker thread, free for signals; bound the time a stopped loop may take."""
        stopping_since: float | None = None
        reported = False
        while True:
            thread.join(0.2)
            if not thread.is_alive():
                return
            watch = self.worker.watch
            if stopping_since is None and (self._stop.is_set() or (watch is not None and watch.problem)):
                stopping_since = time.monotonic()  # a changed topic: the loop raises it at its next step
            self._check_liveness(stopping_since is not None)
            idle = self.stalled()
            if idle is not None and not reported:
                reported = True
                log.error("%s; the loop is at:\n%s", self.alive()[1], self._stack(thread))
            elif idle is None:
                reported = False
            limit = self.config.worker.stop_timeout_ns / 1e9
            if stopping_since is not None and time.monotonic() - stopping_since > limit:
                why = watch.problem if watch is not None and watch.problem else "stopping"
                raise StuckWorker(
                    f"{why}: the worker loop did not finish within {limit:g} s (worker.stop_timeout) while "
                    f"{self.worker.activity}; exiting without the epoch in progress (what is published is "
                    f"final; a restart resumes from there). The loop is at:\n{self._stack(thread)}")

    def _check_liveness(self, stopping: bool) -> None:
        """Raise `Fenced` once the sink learnt another instance took over, and `BrokerSilent` once the
        broker has been silent past ``kafka.transaction_timeout`` (or at all, while stopping)."""
        fenced = getattr(getattr(self.worker, "sink", None), "fenced", None)
        if fenced is not None:
            raise Fenced(fenced)
        broker = self.broker
        if broker is None or broker.answering:
            return
        silent, limit = broker.silent_for(), self.config.kafka.transaction_timeout_ns / 1e9
        if stopping:
            raise BrokerSilent(f"stopping while the broker at {broker.address} does not answer ({silent:.0f} s: "
                               f"{broker.error}): exiting while {self._doing()}, without the epoch in "
                               "progress (what is published is final; a restart resumes from there)")
        if silent > limit:
            raise BrokerSilent(f"the broker at {broker.address} has not answered for {silent:.0f} s ({broker.error}), "
                               f"longer than kafka.transaction_timeout ({limit:g} s): exiting while "
                               f"{self._doing()} (what is published is final; a restart resumes from there)")

    def _doing(self) -> str:
        """What the worker loop is doing, and the published epochs whose commit has not landed."""
        pending = getattr(getattr(self.worker, "sink", None), "pending", lambda: 0)()
        return self.worker.activity + (f", {pending} published epochs waiting for their commit" if pending else "")

    @staticmethod
    def _stack(thread: threading.Thread) -> str:
        frame = sys._current_frames().get(thread.ident or -1)
        return "".join(traceback.format_stack(frame, limit=8)).rstrip() if frame is not None else "(unknown)"

    def stop(self) -> None:
        self._stop.set()
        if self.worker is not None:
            self.worker.stop()

    def close(self) -> None:
        if self.endpoints is not None:
            self.endpoints.close()
            self.endpoints = None


def watch_broker(config: Config) -> BrokerWatch | None:
    """The watch over ``config``'s broker (`kafka.liveness`)."""
    return BrokerWatch(config.client_options(), topic=config.inputs[0].topic if config.inputs else None)


def make_worker(config: Config, stats: Any, *, snapshot_from: str | None = None) -> Any:
    """The data path's worker for ``config`` (see `factory.worker_from_config`)."""
    from .factory import worker_from_config

    return worker_from_config(config, stats, snapshot_from=snapshot_from)
