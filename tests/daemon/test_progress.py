"""Progress policies and epoch closing, with a hand-moved clock."""

from __future__ import annotations

import pytest

from ddflow.daemon.exceptions import OptionsError
from ddflow.daemon.input.progress import Bound, EpochPolicy, InputProgress, ReclockClock, meet_bounds
from ddflow.operators.lattice import T_MIN


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_explicit_moves_only_on_markers_and_takes_the_meet():
    p = InputProgress("explicit")
    p.assign([0, 1])
    p.on_times(0, 100)
    assert p.bound() == Bound(T_MIN)
    p.on_progress(0, 50)
    assert p.bound() == Bound(T_MIN)
    p.on_progress(1, 70)
    assert p.bound() == Bound(50)
    p.on_progress(0, 40)  # markers never move a frontier back
    assert p.bound() == Bound(50)


def test_monotonic_idle_partitions_stop_holding_the_frontier():
    clock = Clock()
    p = InputProgress("monotonic", idle_timeout=2.0, monotonic=clock)
    p.assign([0, 1, 2])
    p.on_message(0, clock.t)
    p.on_times(0, 10)
    p.on_message(1, clock.t)
    p.on_times(1, 30)
    assert p.bound() == Bound(T_MIN)  # partition 2 never seen, not idle yet
    p.on_end(2)
    clock.t = 1.0
    assert p.bound() == Bound(T_MIN)
    clock.t = 2.5
    assert p.bound() == Bound(10)  # partition 2 idle at its end: no longer holds
    p.on_message(0, clock.t)
    p.on_message(1, clock.t)
    p.on_end(0)
    p.on_end(1)
    clock.t = 3.0
    assert p.bound() == Bound(10)  # 0 and 1 at end but active within the timeout
    clock.t = 5.0
    assert p.bound() == Bound(31, holds=False)  # all idle: everything seen is complete
    p.on_message(0, clock.t)
    p.on_times(0, 12)
    assert p.bound() == Bound(12)


def test_reclock_frontier_is_a_non_decreasing_clock():
    ticks = iter([100, 90, 120])
    clock = ReclockClock(lambda: next(ticks), lambda: 0)  # the monotonic clock stands still: held at 100
    p = InputProgress("reclock", clock=clock)
    assert [p.bound().time for _ in range(3)] == [100, 100, 120]


def test_meet_bounds_ignores_idle_inputs_unless_all_are():
    assert meet_bounds([Bound(5), Bound(100, holds=False)]) == 5
    assert meet_bounds([Bound(5, holds=False), Bound(100, holds=False)]) == 100
    assert meet_bounds([None, Bound(7)]) == 7
    assert meet_bounds([None]) is None


def test_fixed_resolution_epochs():
    e = EpochPolicy(resolution_ns=1000)
    assert e.next_upper(None, T_MIN, 0, 0) is None
    assert e.next_upper(999, 0, 5, 0) is None
    assert e.next_upper(2500, 0, 5, 0) == 2000
    assert e.next_upper(2500, 2000, 5, 0) is None
    assert e.next_upper(-1, T_MIN, 0, 0) == -1000


def test_variable_epochs_by_count_or_deadline():
    e = EpochPolicy(resolution_ns=None, max_records=10, deadline_s=1.0)
    assert e.next_upper(50, 0, 3, 0.5) is None
    assert e.next_upper(50, 0, 10, 0.5) == 50
    assert e.next_upper(50, 0, 3, 1.0) == 50
    assert e.next_upper(0, 0, 100, 5.0) is None  # the frontier did not move
    assert EpochPolicy(resolution_ns=None).next_upper(7, 0, 0, 0) == 7


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"resolution_ns": 0}, "resolution_ns"),
        ({"resolution_ns": 1.5}, "resolution_ns"),
        ({"max_records": 5}, "not both"),
        ({"resolution_ns": None, "max_records": -1}, "max_records"),
        ({"resolution_ns": None, "deadline_s": -1}, "deadline_s"),
    ],
)
def test_bad_epoch_options_name_the_key(kwargs, key):
    with pytest.raises(OptionsError, match=key):
        EpochPolicy(**kwargs)


def test_bad_policies_name_the_key():
    with pytest.raises(OptionsError, match="progress policy"):
        InputProgress("eventual")
    with pytest.raises(OptionsError, match="idle_timeout"):
        InputProgress("explicit", idle_timeout=1.0)
