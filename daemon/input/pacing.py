"""Pacing: a source reads only the partitions that can move the worker's input frontier.

When the worker has little or no room for more updates, the partitions whose frontier is already
beyond the worker's input frontier cannot make it move: `Pacing.pause_ahead` pauses them (the
consumer stops fetching them) until `Pacing.resume`, or until the frontier catches up with them.
Messages read before a partition was paused wait in the source's `intake.Intake`, in order, and
come first once it is read again, so pacing changes when messages are taken, never which updates
they hold or the time they get (see `source`: lateness depends only on the offsets read).

The source (`source.KafkaSource`) provides ``_intake``, ``_inputs`` (topic -> an input's state:
``spec`` and ``progress``), `bounds` (each input's frontier now) and the consumer calls `_pause`
and `_resume` (`consumer.ConsumerTransport`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from .intake import Intake
from .progress import Bound

__all__ = ["Pacing"]

log = logging.getLogger("ddflow.daemon.input.source")


class Pacing:
    """Pausing and resuming the input partitions by the worker's input frontier."""

    _intake: Intake
    _inputs: Mapping[str, Any]
    bounds: Callable[[], dict[str, Bound | None]]
    _pause: Callable[[list[tuple[str, int]]], None]
    _resume: Callable[[list[tuple[str, int]]], None]

    @property
    def paused(self) -> set[tuple[str, int]]:
        """The (topic, partition)s not read for now (see `pause_ahead`)."""
        return set(self._intake.paused)

    def pause_ahead(self, frontier: int | None, *, hold: bool = True) -> None:
        """Read only the partitions that hold the inputs' ``frontier`` (the worker's input
        frontier) until `resume`: those beyond it cannot make it move, and the worker has little
        room for their updates. Partitions paused before and no longer beyond it (the frontier
        caught up with them) are read again; read messages of paused ones wait, in order.
        Reclocked inputs are paused whole when their frontier is beyond it. With ``hold`` (the
        worker has no room at all), a partition read is also held as soon as a marker takes it
        beyond ``frontier``: each is read up to its next marker, no further."""
        if frontier is None:
            return
        intake = self._intake
        intake.hold = frontier if hold else None
        ahead = set()
        bounds = self.bounds()
        for topic, state in self._inputs.items():
            bound = bounds[state.spec.name]
            for p, ps in state.progress.partitions.items():
                if state.spec.policy == "reclock":
                    beyond = bound is not None and bound.time > frontier
                else:
                    beyond = ps.frontier > frontier
                if beyond:
                    ahead.add((topic, p))
        self._resume_only(sorted(intake.paused - ahead))
        new = sorted((ahead - intake.paused) | (ahead & intake.unpaused))
        if new:
            self._pause(new)
            intake.pausing(new)
            log.debug("epoch full at frontier %s: paused %s", frontier, new)

    def resume(self) -> None:
        """Read every partition again; the messages waiting for paused ones come first."""
        self._intake.hold = None
        self._resume_only(sorted(self._intake.paused))

    def _resume_only(self, partitions: list[tuple[str, int]]) -> None:
        """Read ``partitions`` (paused) again; their waiting messages come first, in order."""
        if partitions:
            resume = self._intake.release(partitions)
            if resume:
                self._resume(resume)

    def _past_hold(self, topic: str, partition: int) -> bool:
        """Whether a partition read while others are paused (see `pause_ahead`) is now beyond the
        frontier they wait for (its marker moved it): its next updates are not needed yet."""
        state = self._inputs.get(topic)
        hold = self._intake.hold
        if state is None or state.spec.policy == "reclock" or hold is None:
            return False
        ps = state.progress.partitions.get(partition)
        return ps is not None and ps.frontier > hold
