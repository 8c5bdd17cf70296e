"""Reclock bindings: arrival times are durable, so a replay assigns the same times.

Unit tests of the binding log (lookups, a torn last line, corrupt lines, compaction and its
floor), a source replaying a topic from its bindings on the real broker (same times, frontier
held at the next bound time), and worker processes on a reclocked input killed repeatedly: the
result topic holds every input record exactly once, at one time.
"""

from __future__ import annotations

import json
import random
import signal
import time

import pytest
from recovery_support import WorkerProcess, kill_leftovers

from ddflow.daemon.state.checkpoint import CheckpointStore
from ddflow.daemon.exceptions import RecoveryError, SnapshotError
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.reclock import ReclockBindings
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.input.source import InputSpec, KafkaSource


@pytest.fixture(autouse=True)
def no_leftover_workers():
    yield
    kill_leftovers()


def test_bindings_survive_a_reload_and_give_each_offset_its_time(tmp_path):
    path = tmp_path / "t.log"
    b = ReclockBindings(path)
    b.bind(100, {0: 3, 1: 2})
    b.bind(250, {0: 5})
    b.bind(400, {1: 7})
    b.persist()
    again = ReclockBindings(path)
    expected = {(0, 0): 100, (0, 2): 100, (0, 3): 250, (0, 4): 250, (0, 5): None,
                (1, 0): 100, (1, 1): 100, (1, 2): 400, (1, 6): 400, (1, 7): None, (2, 0): None}
    for (p, o), t in expected.items():
        assert again.lookup(p, o) == t == b.lookup(p, o), (p, o)
    assert again.last_time == 400 and len(again) == 3
    assert again.hold(0, 3) == 250 and again.hold(0, 5) is None


def test_a_torn_last_line_is_dropped_and_a_corrupt_one_refused(tmp_path):
    path = tmp_path / "t.log"
    b = ReclockBindings(path)
    b.bind(100, {0: 3})
    b.persist()
    with open(path, "a") as f:
        f.write('{"time": 200, "upp')  # a crash while appending: nothing was published from it
    again = ReclockBindings(path)
    assert len(again) == 1 and again.lookup(0, 3) is None
    again.bind(300, {0: 6})
    again.persist()
    assert [e[0] for e in ReclockBindings(path).entries] == [100, 300]
    lines = path.read_text().splitlines()
    lines[1] = '{"time": "x", "upper": {}}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=r"t.log line 2: .* is corrupt"):
        ReclockBindings(path)
    with pytest.raises(SnapshotError, match="partition 0 upper 2 does not grow"):
        b.bind(500, {0: 2})


def test_compaction_keeps_what_a_restore_needs_and_refuses_the_rest(tmp_path):
    path = tmp_path / "t.log"
    b = ReclockBindings(path)
    for i in range(1, 6):
        b.bind(i * 100, {0: i * 10, 1: i * 5})
    assert b.compact({0: 30, 1: 15}) == 3
    again = ReclockBindings(path)
    assert [t for t, _ in again.entries] == [400, 500] and again.floor == {0: 30, 1: 15}
    assert again.lookup(0, 30) == 400 and again.lookup(1, 24) == 500
    with pytest.raises(RecoveryError, match="offset 12 was dropped"):
        again.lookup(0, 12)
    with pytest.raises(RecoveryError, match=r"'t'\[1\]: resuming at offset 0, but the time bindings below offset 15"):
        again.check_start(1, 0, "t")
    again.check_start(1, 15, "t")


def test_compaction_records_the_floor_even_when_nothing_is_entirely_below_it(tmp_path):
    """A binding spanning partitions stays while one of them is above the floor; the floor is
    still the oldest kept checkpoint's offsets (restores never resume below them)."""
    path = tmp_path / "reclock" / "t.log"
    empty = ReclockBindings(path)
    assert empty.compact({0: 4}) == 0  # no binding yet (not even a log): the floor alone is written
    assert ReclockBindings(path).floor == {0: 4}
    b = ReclockBindings(path)
    b.bind(100, {0: 7, 1: 2})
    b.bind(200, {1: 5})
    assert b.compact({0: 7, 1: 0}) == 0
    again = ReclockBindings(path)
    assert again.floor == {0: 7, 1: 0} and [t for t, _ in again.entries] == [100, 200]
    assert again.lookup(1, 1) == 100 and again.lookup(1, 4) == 200 and again.lookup(0, 7) is None
    with pytest.raises(RecoveryError, match=r"'t'\[0\]: resuming at offset 5, but the time bindings below offset 7"):
        again.check_start(0, 5, "t")
    assert again.compact({0: 7, 1: 2}) == 1 and ReclockBindings(path).floor == {0: 7, 1: 2}


def drain(source, frontier=0, rounds=400, max_messages=10_000, pause=0.0):
    got = []
    for _ in range(rounds):
        polled = source.poll(frontier, max_messages=max_messages, timeout=0.05)
        time.sleep(pause)
        got.extend(polled.updates["a"])
        if not polled.messages and got:
            break
    return got


@pytest.mark.kafka
def test_a_replay_assigns_the_recorded_times_and_holds_the_frontier(kafka_options, make_topic, tmp_path):
    topic = make_topic("a", partitions=2)
    spec = InputSpec("a", topic, fields=["k"], policy="reclock")
    with UpdateProducer(topic, kafka_options, batch_size=3) as producer:
        for i in range(30):
            producer.send((i,), 0, 1)
            if i % 7 == 6:
                producer.flush()
    log = tmp_path / "a.log"
    first = KafkaSource([spec], kafka_options, group_id="r1")
    first.open(bindings={topic: ReclockBindings(log)})
    original = []
    while len(original) < 30:
        original.extend(drain(first, max_messages=2, pause=0.002))  # small polls: several arrival times
    first.persist()
    first.close()
    assert len({t for _, t, _ in original}) >= 2
    with UpdateProducer(topic, kafka_options) as producer:
        for i in range(30, 40):
            producer.send((i,), 0, 1)
    replay = KafkaSource([spec], kafka_options, group_id="r2")
    bindings = ReclockBindings(log)
    replay.open(bindings={topic: bindings})
    earliest = min(t for _, t, _ in original)
    assert replay.frontier() == earliest  # held at the first bound time, not "now"
    replayed = []
    while len(replayed) < 40:
        replayed.extend(drain(replay))
    replay.close()
    times = {r: t for r, t, _ in replayed}
    assert {r: t for r, t, _ in original} == {r: times[r] for r, _, _ in original}
    assert min(times[(i,)] for i in range(30, 40)) >= max(t for _, t, _ in original)
    # without the bindings the same offsets get new times: the replay would not be deterministic
    fresh = KafkaSource([spec], kafka_options, group_id="r3")
    fresh.open()
    again = drain(fresh)
    fresh.close()
    assert {t for _, t, _ in again}.isdisjoint({t for _, t, _ in original})


def reclock_spec(kafka_options, topics, directory, interval):
    return {
        "flow": "echo",
        "kafka_options": dict(kafka_options),
        "group_id": f"g-{topics['a']}",
        "inputs": [{"name": "a", "topic": topics["a"], "fields": {"key": "int", "val": "int"}, "policy": "reclock"}],
        "outputs": [{"name": n, "topic": topics[n], "max_batch_updates": 20} for n in ("echo_a", "counts")],
        "epoch": {"resolution_ns": 20_000_000},
        "max_poll_messages": 7,
        "worker": {"checkpoint_dir": str(directory), "checkpoint_interval": interval},
    }


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("interval", [1000.0, 0.1])
def test_killed_reclock_workers_publish_every_record_once(kafka_options, make_topic, tmp_path, interval):
    """interval 1000: no checkpoint is ever written, every restart replays from offset 0 through
    the bindings; 0.1: restarts restore checkpoints and replay the bindings made after them (the
    first and fourth workers are killed only once a checkpoint of theirs landed, so the workers
    after them restore one whatever the timing of the other kills)."""
    rng = random.Random(int(interval * 10))
    topics = {"a": make_topic("a", partitions=3), "echo_a": make_topic("echo", partitions=2),
              "counts": make_topic("counts", partitions=2)}
    spec = reclock_spec(kafka_options, topics, tmp_path / "ckpt", interval)
    sent = 0
    with UpdateProducer(topics["a"], kafka_options, batch_size=5) as producer:
        def burst(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                producer.send((sent, sent % 7), 0, 1)
                sent += 1
            producer.flush()

        for incarnation in range(5):
            worker = WorkerProcess({**spec, "die": ["output_batch", 3]} if incarnation == 2 else spec)
            worker.wait_ready()
            if interval < 1000 and incarnation in (1, 4):
                assert worker.restored is not None, "no checkpoint restored"
            burst(40)
            if incarnation == 2:
                while worker.proc.poll() is None:
                    burst(5)
                    time.sleep(0.05)
            else:
                target = time.time_ns() + 100_000_000
                worker.wait_frontier(target)  # the burst is published ...
                if interval < 1000 and incarnation in (0, 3):
                    worker.wait_checkpoint()
                burst(rng.randint(5, 40))  # ... and another one is being read when the kill comes
                time.sleep(rng.uniform(0.0, 0.05))
                worker.kill()
            assert worker.proc.returncode == -signal.SIGKILL, worker.stderr[-2000:]
        burst(10)
    last = WorkerProcess(spec)
    last.wait_frontier(time.time_ns() + 300_000_000, timeout=120)
    # a reclocked input's frontier is the clock, whether or not the last messages were read yet
    # (they get their arrival time when they are): wait for every record before stopping
    with ResultClient(topics["echo_a"], kafka_options) as client:
        deadline = time.monotonic() + 120
        while sum(client.view.values()) < sent and time.monotonic() < deadline:
            client.poll(0.1)
    assert last.terminate() == 0, last.stderr[-2000:]
    end = last.exit_frontier
    diffs = {}
    with ResultClient(topics["echo_a"], kafka_options) as client:
        for change in client.changes(timeout=60):
            for record, t, diff in change.updates:
                diffs[(record, t)] = diffs.get((record, t), 0) + diff
            if change.frontier >= end:
                break
        view = client.view
    assert view == {(i, i % 7): 1 for i in range(sent)}  # every record once: none lost, none re-sent
    assert sorted(diffs.values()) == [1] * sent  # ... each at exactly one time
    # bindings that no kept checkpoint needs were dropped: the floor is the oldest kept checkpoint's offsets
    log = tmp_path / "ckpt" / "reclock" / f"{topics['a']}.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    floor = {int(p): o for p, o in lines[0]["floor"].items()}
    assert floor == CheckpointStore(tmp_path / "ckpt").oldest_offsets()[topics["a"]]
    assert all(any(o > floor[int(p)] for p, o in b["upper"].items()) for b in lines[1:])
