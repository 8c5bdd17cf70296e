"""Input progress: per-partition frontiers under a progress policy, and when epochs close.

A partition's frontier ``f`` says that every time ``< f`` is complete on that partition; an
update behind it is late. How it moves depends on the input's policy:

* ``explicit``: only progress markers ``{"progress": t}`` move it (to the largest ``t`` seen).
* ``monotonic``: times are non-decreasing per partition, so seeing time ``t`` (or a marker ``t``)
  moves it to ``t``. A partition at its end with no message for ``idle_timeout`` seconds no longer
  holds the input back; once everything is idle, what was seen becomes complete.
* ``reclock``: the daemon assigns arrival times from a non-decreasing nanosecond clock, so the
  input's frontier is simply "now": any time assigned later is at least as large.

Whatever the policy, a partition's frontier is also raised when the worker's frontier passes it
(an idle partition does not hold it back), so it never lags the engine (see `floors`). An input's
frontier is the meet (minimum) over its partitions; the worker's input frontier is the meet over
inputs. An `EpochPolicy` turns that frontier into epoch boundaries: a fixed resolution
(the frontier rounded down to a multiple of ``resolution_ns``) or a variable one (close at the
current frontier after ``max_records`` updates or ``deadline_s`` seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...operators.lattice import T_MIN
from ..exceptions import OptionsError

__all__ = [
    "POLICIES",
    "LATE_POLICIES",
    "ReclockClock",
    "PartitionProgress",
    "InputProgress",
    "Bound",
    "meet_bounds",
    "EpochPolicy",
]

POLICIES = ("explicit", "monotonic", "reclock")
LATE_POLICIES = ("advance", "reject")


class ReclockClock:
    """The arrival-time clock of reclocked inputs: non-decreasing, and never standing still.

    `now()` follows the wall clock (``clock_ns``) but never goes below a value it returned before or
    was told to `catch_up` to. While the wall clock is behind that value (it was set back, or a
    restarted worker's clock is behind the times its bindings recorded) the clock moves on from it
    at the rate of the monotonic clock (``monotonic_ns``), so arrival times keep growing and the
    input frontier keeps moving: held at the last value instead, every update would wait, unfinished,
    for as long as the wall clock was set back. A wall clock set forward is followed at once."""

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns,
                 monotonic_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock_ns = clock_ns
        self._monotonic_ns = monotonic_ns
        self._last = T_MIN
        self._last_mono = 0

    def now(self) -> int:
        t, mono = self._clock_ns(), self._monotonic_ns()
        if t < self._last:
            t = self._last + max(mono - self._last_mono, 0)
        self._last, self._last_mono = t, mono
        return t

    def catch_up(self, t: int) -> None:
        """Never return less than ``t`` from now on (moving on from it while the wall clock is behind)."""
        if t > self._last:
            self._last, self._last_mono = t, self._monotonic_ns()


@dataclass
class PartitionProgress:
    """What is known about one partition: its frontier, the largest time seen, its activity."""

    frontier: int = T_MIN
    max_time: int | None = None
    last_activity: float = 0.0
    at_end: bool = False
    idle: bool = False


@dataclass(frozen=True)
class Bound:
    """An input's frontier. ``holds`` is False for an input whose partitions are all idle: it then
    only suggests ``time`` (everything it saw) and does not hold other inputs back."""

    time: int
    holds: bool = True


def meet_bounds(bounds: Iterable[Bound | None]) -> int | None:
    """The worker's input frontier: min over holding bounds, else max of the suggestions."""
    holding = [b.time for b in bounds if b is not None and b.holds]
    if holding:
        return min(holding)
    suggested = [b.time for b in bounds if b is not None]
    return max(suggested) if suggested else None


class InputProgress:
    """Per-partition frontiers of one input under one policy."""

    def __init__(
        self,
        policy: str,
        *,
        idle_timeout: float | None = None,
        clock: ReclockClock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy not in POLICIES:
            raise OptionsError(f"progress policy: {policy!r} is not one of {', '.join(POLICIES)}")
        if idle_timeout is not None:
            if policy != "monotonic":
                raise OptionsError(f"idle_timeout: only the 'monotonic' policy uses it, the policy is {policy!r}")
            if not isinstance(idle_timeout, (int, float)) or idle_timeout < 0:
                raise OptionsError(f"idle_timeout: expected seconds >= 0, got {idle_timeout!r}")
        self.policy = policy
        self.idle_timeout = idle_timeout
        self.clock = clock or ReclockClock()
        self._monotonic = monotonic
        self.partitions: dict[int, PartitionProgress] = {}

    def assign(self, partitions: Iterable[int]) -> None:
        now = self._monotonic()
        for p in partitions:
            self.partitions.setdefault(p, PartitionProgress(last_activity=now))

    def on_message(self, partition: int, now: float) -> None:
        state = self.partitions[partition]
        state.last_activity = now
        state.at_end = False
        state.idle = False

    def on_end(self, partition: int) -> None:
        """The consumer reached the end of the partition."""
        self.partitions[partition].at_end = True

    def on_progress(self, partition: int, t: int) -> None:
        state = self.partitions[partition]
        if t > state.frontier:
            state.frontier = t

    def raise_to(self, partition: int, t: int) -> bool:
        """Raise the partition's frontier to ``t`` (no earlier time is complete-able there any
        more: the worker's frontier passed it, or a recorded floor says so). True if it moved."""
        state = self.partitions[partition]
        if t > state.frontier:
            state.frontier = t
            return True
        return False

    def restore(self, partition: int, frontier: int, max_time: int | None) -> None:
        """Start a partition from what a checkpoint recorded (its frontier and largest time)."""
        state = self.partitions[partition]
        state.frontier = max(state.frontier, frontier)
        if max_time is not None and (state.max_time is None or max_time > state.max_time):
            state.max_time = max_time

    def on_times(self, partition: int, max_time: int) -> None:
        """The largest data time among the updates just read from the partition."""
        state = self.partitions[partition]
        if state.max_time is None or max_time > state.max_time:
            state.max_time = max_time
        if self.policy == "monotonic" and max_time > state.frontier:
            state.frontier = max_time

    def bound(self) -> Bound | None:
        """This input's frontier now (None: nothing known and nothing held)."""
        if self.policy == "reclock":
            return Bound(self.clock.now())
        if not self.partitions:
            return None
        now = self._monotonic()
        active: list[int] = []
        suggestions: list[int] = []
        for state in self.partitions.values():
            state.idle = (
                self.idle_timeout is not None and state.at_end and now - state.last_activity >= self.idle_timeout
            )
            if not state.idle:
                active.append(state.frontier)
            elif state.max_time is not None:
                suggestions.append(max(state.frontier, state.max_time + 1))
        if active:
            return Bound(min(active))
        return Bound(max(suggestions), holds=False) if suggestions else None


@dataclass(frozen=True)
class EpochPolicy:
    """When epochs close. Fixed: ``resolution_ns`` (default 1 ms). Variable: ``resolution_ns=None``
    and ``max_records`` and/or ``deadline_s`` (with neither, close whenever the frontier moves)."""

    resolution_ns: int | None = 1_000_000
    max_records: int | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.resolution_ns is not None:
            if type(self.resolution_ns) is not int or self.resolution_ns <= 0:
                raise OptionsError(f"epoch resolution_ns: expected a positive int, got {self.resolution_ns!r}")
            if self.max_records is not None or self.deadline_s is not None:
                raise OptionsError(
                    "epoch policy: give either resolution_ns (fixed epochs) or max_records/deadline_s "
                    "(variable epochs), not both"
                )
        if self.max_records is not None and (type(self.max_records) is not int or self.max_records <= 0):
            raise OptionsError(f"epoch max_records: expected a positive int, got {self.max_records!r}")
        if self.deadline_s is not None and (not isinstance(self.deadline_s, (int, float)) or self.deadline_s < 0):
            raise OptionsError(f"epoch deadline_s: expected seconds >= 0, got {self.deadline_s!r}")

    def next_upper(self, frontier: int | None, current: int, records: int, opened_for: float) -> int | None:
        """The upper bound of the epoch to close now, or None to keep the epoch open.

        ``frontier``: the worker's input frontier; ``current``: the engine's frontier (the open
        epoch's lower); ``records``: updates fed since it opened; ``opened_for``: seconds since.
        """
        if frontier is None or frontier <= current:
            return None
        if self.resolution_ns is not None:
            upper = frontier - frontier % self.resolution_ns
            return upper if upper > current else None
        if self.max_records is None and self.deadline_s is None:
            return frontier
        if self.max_records is not None and records >= self.max_records:
            return frontier
        if self.deadline_s is not None and opened_for >= self.deadline_s:
            return frontier
        return None
