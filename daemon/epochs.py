"""Closing an epoch: the inputs advance, the dataflow runs, the outputs are published and committed.

When the epoch policy says so, the epoch ``[lower, upper)`` closes: every input advances to
``upper``, the dataflow runs, each output capture drains the updates that became final (times
below ``upper``), and the sink publishes them with progress markers, committing the consumed
input offsets (and the dead letters written meanwhile) in the same transaction when it can. A
closed epoch is reported to the stats once its commit landed. A multiplicity outside int64 (the
engine's `DiffError`, or an input's count in the checkpoint state) stops the worker with a
`WorkerError` naming the step, operator, record and time, before anything of that epoch is
published or committed; so does a user function that raised (the engine's `UserFunctionError`:
the operator, the function with its file and line, the record and its time), its traceback logged
at ERROR and the message saying what to do.

`EpochCloser` is this part of `worker.Worker`: it only groups the methods, the state is the
worker's (set up by its ``__init__``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import replace
from typing import Any

from .block import Block
from .deadletter import failure_time
from .exceptions import WorkerError
from .observe.stats import EpochReport

__all__ = ["EpochCloser", "REFUSED", "USER_FUNCTION_ADVICE"]

log = logging.getLogger("ddflow.daemon.worker")

# why an epoch stopped the worker when a multiplicity would leave int64 (see `EpochCloser._close_epoch`)
REFUSED = ("a multiplicity outside int64 was refused (nothing of this epoch is published; a restart stops here "
           "again until the input is corrected)")
# what to do when a user function raised (the traceback is logged at ERROR just before)
USER_FUNCTION_ADVICE = ("Nothing of this epoch is published and the record stays in the input, so a restart "
                        "stops here again: fix the function so that it accepts every record its input can hold, "
                        "or set dataflow.on_error = \"dead_letter\" (or dataflow.on_error_functions for this "
                        "function) to send such records to the dead-letter topic and go on without them "
                        "(the traceback is logged above)")


class EpochCloser:
    """Closing, publishing, committing and checkpointing epochs: the methods `worker.Worker` has for
    it (see the module docstring)."""

    source: Any
    sink: Any
    recovery: Any
    stats: Any
    dataflow: Any
    _failures_ahead: list[Any]  # user functions' failures at times beyond the epochs closed so far

    def _doing(self, activity: str) -> None:
        raise NotImplementedError  # the worker's

    def _finish_loading(self) -> EpochReport:
        """Feed the loaded snapshot (base at F - 1, pending at their times, as column blocks) and publish the output
        accumulated at its frontier F as the epoch [T_MIN, F)."""
        assert self._loading is not None and self.recovery is not None
        loader, self._loading = self._loading, None
        loaded = loader.result()
        frontier = loader.snapshot.frontier
        fed = 0
        for name, (base, pending) in loaded.items():
            session = self._sessions[name]
            try:
                for block in (base, pending):  # columns, as the snapshot's files hold them
                    if len(block):
                        session.update_many(block.records, block.times, block.diffs)
                        self.recovery.fed(name, block.diffs)
            except Exception as exc:
                raise WorkerError(f"loading {loader.snapshot}: feeding input {name!r}: "
                                  f"{type(exc).__name__}: {exc}") from exc
            fed += len(base) + len(pending)
        log.info("loaded %s: %d updates in %.3f s; publishing the output at frontier %d", loader.snapshot, fed,
                 loader.seconds or 0.0, frontier)
        self.recovery.restarted_timer()
        return self._close_epoch(frontier, snapshot=True)

    def _maybe_close(self, *, force: bool, full: bool = False) -> EpochReport | None:
        """Close the epoch if the policy says so; ``force`` (stopping) or ``full`` (the epoch holds
        ``max_epoch_updates``): at the frontier if the policy's grid has no boundary there."""
        frontier = self.source.frontier()
        self.stats.input_frontier = frontier
        opened_for = time.monotonic() - self._epoch_opened
        beyond = frontier if frontier is not None and frontier > self.frontier else None
        if force:  # stopping: publish everything complete, off the epoch grid if need be
            upper = beyond
        else:
            upper = self.epoch_policy.next_upper(frontier, self.frontier, self._epoch_records, opened_for)
            if upper is None and full:
                upper = beyond
        return None if upper is None else self._close_epoch(upper)

    def _close_epoch(self, upper: int, *, snapshot: bool = False) -> EpochReport:
        from ..operators.errors import DiffError, UserFunctionError  # loaded with the dataflow already

        lower = self.frontier
        started = time.perf_counter()
        step = "advancing inputs"
        self._doing(f"epoch [{lower}, {upper}): running the dataflow")
        try:
            for session in self._sessions.values():
                session.advance_to(upper)
            step = "running the dataflow"
            self._before_run()
            self.dataflow.run()
            self._dead_letter_failures(upper)
            outputs: dict[str, Block] = {}
            for name, capture in self._captures.items():
                step = f"draining output {name!r}"
                outputs[name] = Block(*capture.drain_columns())
        except DiffError as exc:  # nothing of the epoch is published nor its input offsets committed
            self._refuse(f"epoch [{lower}, {upper}): {step}: {REFUSED}: {exc}", exc)
        except UserFunctionError as exc:  # the operator, function, record and time are named
            log.error("epoch [%s, %s): %s", lower, upper, exc, exc_info=exc)
            self._refuse(f"epoch [{lower}, {upper}): {step}: {exc}. {USER_FUNCTION_ADVICE}", exc)
        except Exception as exc:  # the dataflow failed otherwise: the same, named
            self._refuse(f"epoch [{lower}, {upper}): {step}: {type(exc).__name__}: {exc}", exc)
        for name, block in outputs.items():
            late = (block.times < lower) | (block.times >= upper)
            if late.any():
                raise WorkerError(
                    f"epoch [{lower}, {upper}): output {name!r} drained {int(late.sum())} updates outside the epoch, "
                    f"e.g. {block.take(late).rows()[0]!r:.120}"
                )
        if self.recovery is not None:
            try:
                self.recovery.check(upper)  # a checkpoint can hold the inputs, before anything depends on it
            except WorkerError as exc:
                self._refuse(f"epoch [{lower}, {upper}): checkpoint state: {REFUSED}: {exc}", exc)
        self._doing(f"epoch [{lower}, {upper}): publishing")
        self.source.raise_to(upper)  # partitions behind the new frontier (idle ones) start there
        self.source.persist()  # reclock times and partition floors are durable before outputs depend on them
        written = self.sink.publish(lower, upper, outputs, offsets=self.source.next_offsets(), snapshot=snapshot)
        self.frontier = upper
        self._closed_epochs += 1
        self._just_closed = True
        report = EpochReport(
            number=self._closed_epochs,
            lower=lower,
            upper=upper,
            seconds=time.perf_counter() - started,
            updates_in=dict(self._epoch_in),
            updates_out=written,
            latencies=[],
            incarnation=self.sink.incarnation,
        )
        self._unsettled.append(report)
        self._epoch_records = 0
        self._epoch_in = {}
        self._epoch_opened = time.monotonic()
        self._open_times = [kept for kept in (t[t >= upper] for t in self._open_times) if len(kept)]
        self.open_updates = sum(len(t) for t in self._open_times)
        if self.max_epoch_updates is None or 2 * self.open_updates < self.max_epoch_updates:
            self.source.resume()  # room again: partitions paused while the epoch was full are read again
        self._settle()
        if self.recovery is not None:
            self._doing(f"epoch [{lower}, {upper}): checkpointing")
            self._checkpoint(upper, force=False)
        return report

    def _dead_letter_failures(self, upper: int) -> None:
        """The records user functions raised on and the dataflow's ``dead_letter`` policy took (treated
        as absent), each to the dead-letter topic in the transaction of the epoch holding its time:
        those of this epoch (below ``upper``) now, those of records fed ahead of it when their epoch
        closes (a stop drops them: their records are replayed, so they come again)."""
        quarantine = getattr(self.dataflow.context, "quarantine", None)
        failed = self._failures_ahead + ([] if quarantine is None else quarantine.drain())
        writer = getattr(self.sink, "dead_letters", None)
        if failed and writer is None:
            raise WorkerError(f"{failed[0]}: the on_error policy is dead_letter but there is no dead-letter topic")
        self._failures_ahead = []
        for error in failed:
            at = failure_time(error)
            if at is not None and at >= upper:
                self._failures_ahead.append(error)
            else:
                writer.write_failure(error)

    def _stop_loading(self) -> bool:
        """Stopped while the snapshot loads. A lone worker drops the load and returns True: no epoch
        closes before the load is done, so nothing was published and no input offset committed since
        the checkpoint, and the next start restores the same one. Workers of a mesh finish it and
        return False (the others exchange with this one in its first epoch)."""
        assert self._loading is not None
        if getattr(self, "count", 1) > 1:
            self._finish_loading()
            return False
        loader, self._loading = self._loading, None
        log.info("stopped while loading %s (%.1f s after it began): nothing was published since it; the next start "
                 "restores it again", loader.snapshot, time.perf_counter() - loader.started)
        return True

    def _before_run(self) -> None:
        """Called before the dataflow runs an epoch (`cluster.ClusterWorker` makes its inputs' reclock
        bindings and floors durable there: other workers receive updates of the epoch during the run
        and may publish outputs of them before this worker does)."""

    def _close_on_stop(self) -> EpochReport | None:
        """Stopping: close a last epoch at the exact input frontier, if it moved."""
        return self._maybe_close(force=True)

    def _settle(self) -> None:
        """Report the closed epochs whose commit landed (their outputs are final): their latencies
        (arrival to final), the stats and the epoch listeners."""
        committed = self.sink.committed_upper
        if not self._unsettled:
            return
        finished = time.time()
        while self._unsettled and (committed is None or self._unsettled[0].upper <= committed):
            report = self._unsettled.popleft()
            latencies: list[tuple[float, int]] = []
            still: deque[tuple[str, float, int, int]] = deque()
            for batch in self._waiting:
                _, arrival, count, max_time = batch
                if max_time < report.upper:
                    latencies.append((max(0.0, finished - arrival), count))
                else:
                    still.append(batch)
            self._waiting = still
            self.stats.epoch_published(replace(report, latencies=latencies, incarnation=self.sink.incarnation))

    def _refuse(self, message: str, cause: BaseException) -> None:
        """Stop on an epoch the dataflow cannot compute: the epochs closed before it are valid, so
        they are committed first (a commit window may hold them; a restart would stop at the same
        epoch again, and they would never be published), then `WorkerError` is raised."""
        try:
            self.commit()
        except Exception as exc:  # the refusal is the error to report; the commit's is logged
            log.error("committing the epochs closed before a refused one: %s: %s", type(exc).__name__, exc)
        raise WorkerError(message) from cause

    def commit(self) -> None:
        """Commit what the sink holds (every closed epoch becomes final) and report it."""
        self._committing()
        self.sink.commit()
        self._settle()

    def _committing(self) -> None:
        """Name the commit that may run now as the loop's activity (a stall's report names it)."""
        if self._unsettled:
            first, last = self._unsettled[0], self._unsettled[-1]
            self._doing(f"epoch [{first.lower}, {last.upper}): publishing (the commit of {len(self._unsettled)} "
                        "epochs)")
        else:
            self._doing("publishing dead letters")

    def _checkpoint(self, upper: int, *, force: bool) -> None:
        assert self.recovery is not None
        try:
            self.recovery.epoch_published(upper, self.source.next_offsets(), force=force, extra=self._checkpoint_extra,
                                          before_write=self.commit)
        except Exception as exc:
            raise WorkerError(f"epoch up to {upper}: writing a checkpoint: {type(exc).__name__}: {exc}") from exc

    def _checkpoint_extra(self) -> dict[str, Any]:
        """What a checkpoint records besides the inputs: each input partition's frontier, and where
        the result topics may be read from (`KafkaSink.positions`)."""
        progress = self.source.progress_state()
        positions = self.sink.positions()
        starts: dict[str, dict[str, int]] = {}
        for (topic, p), offset in positions["starts"].items():
            starts.setdefault(topic, {})[str(p)] = offset
        return {
            "progress": {topic: {str(p): list(v) for p, v in parts.items()} for topic, parts in progress.items()},
            "outputs": {"finals": positions["finals"], "starts": starts},
        }
