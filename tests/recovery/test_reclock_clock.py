"""A wall clock set back under reclocked inputs: arrival times keep growing and the input frontier
keeps moving (at the monotonic clock's rate) instead of standing still for as long as the clock was
set back, in one process and across a restart whose clock is behind the recorded bindings. The
clock is moved by hand; the source reads the real broker."""

from __future__ import annotations

import pytest
from test_reclock import drain  # type: ignore[import-not-found]

from ddflow.daemon.input.progress import ReclockClock
from ddflow.daemon.input.reclock import ReclockBindings
from ddflow.daemon.input.source import InputSpec, KafkaSource
from ddflow.daemon.kafka.producer import UpdateProducer

W = 1_800_000_000_000_000_000  # the wall clock before it is set back
HOUR = 3_600_000_000_000
MS = 1_000_000


class Hands:
    """A wall clock and a monotonic clock moved by the test (ns)."""

    def __init__(self, wall: int, mono: int = 0) -> None:
        self.wall, self.mono = wall, mono

    def clock(self) -> ReclockClock:
        return ReclockClock(lambda: self.wall, lambda: self.mono)


def test_the_clock_moves_on_at_the_monotonic_rate_while_the_wall_clock_is_behind() -> None:
    hands = Hands(W)
    clock = hands.clock()
    assert clock.now() == W
    hands.wall, hands.mono = W - HOUR, 5 * MS  # set back an hour, 5 ms later
    assert clock.now() == W + 5 * MS
    hands.mono = 7 * MS
    assert clock.now() == W + 7 * MS
    hands.wall = W + HOUR  # set forward: followed at once
    assert clock.now() == W + HOUR
    clock.catch_up(W + 2 * HOUR)
    hands.mono = 8 * MS
    assert clock.now() == W + 2 * HOUR + MS
    clock.catch_up(W)  # never backwards
    assert clock.now() >= W + 2 * HOUR + MS


def send(topic: str, options: dict, keys: range) -> None:
    with UpdateProducer(topic, options) as producer:
        for k in keys:
            producer.send((k,), 0, 1)


@pytest.mark.kafka
def test_a_clock_set_back_under_a_running_source_keeps_the_frontier_moving(kafka_options, make_topic) -> None:
    topic = make_topic("a")
    spec = InputSpec("a", topic, fields=["k"], policy="reclock")
    hands = Hands(W)
    source = KafkaSource([spec], kafka_options, group_id=f"g-{topic}", clock=hands.clock())
    source.open()
    try:
        send(topic, kafka_options, range(5))
        first = drain(source)
        assert len(first) == 5 and {t for _, t, _ in first} == {W}
        hands.wall, hands.mono = W - HOUR, hands.mono + 5 * MS  # NTP sets the clock back an hour
        assert source.frontier() > W  # the updates at W are complete now, not in an hour
        send(topic, kafka_options, range(5, 10))
        later = drain(source)
        assert len(later) == 5 and min(t for _, t, _ in later) > W
    finally:
        source.close()


@pytest.mark.kafka
def test_a_restart_with_its_clock_behind_the_bindings_moves_on_from_them(kafka_options, make_topic, tmp_path) -> None:
    topic = make_topic("a", partitions=2)
    spec = InputSpec("a", topic, fields=["k"], policy="reclock")
    log = tmp_path / "a.log"
    send(topic, kafka_options, range(6))
    first = KafkaSource([spec], kafka_options, group_id="r1", clock=Hands(W).clock())
    first.open(bindings={topic: ReclockBindings(log)})
    original = []
    while len(original) < 6:
        original.extend(drain(first))
    first.persist()
    first.close()

    send(topic, kafka_options, range(6, 10))
    hands = Hands(W - HOUR)  # the restarted worker's clock is an hour behind
    replay = KafkaSource([spec], kafka_options, group_id="r2", clock=hands.clock())
    replay.open(bindings={topic: ReclockBindings(log)})
    try:
        replayed = []
        while len(replayed) < 10:
            replayed.extend(drain(replay))
        times = {r: t for r, t, _ in replayed}
        assert {r: t for r, t, _ in original} == {r: times[r] for r, _, _ in original}  # the recorded times
        assert min(times[(k,)] for k in range(6, 10)) >= W  # new ones not behind them
        hands.mono += MS
        assert replay.frontier() > max(times.values())  # and complete: the frontier moved past them
    finally:
        replay.close()
