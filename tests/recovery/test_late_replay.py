"""Late updates are classified the same way by a replay as by the run that published them.

An update is late when its time is behind what earlier messages of its partition promised (its
progress markers; under ``monotonic`` also its earlier times), or behind the frontier the worker
recorded for that partition when it went idle. That depends on the offsets read, never on how
the messages were split into polls, so a worker killed after publishing and replaying from an
older checkpoint (with other poll sizes, other idle timings) publishes nothing twice and rejects
nothing it once published.
"""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Producer
from recovery_support import WorkerProcess, kill_leftovers

from ddflow.daemon.deadletter import decode_dead_letter
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.formats.msgpack import encode_progress, encode_update
from support.broker import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MS = 1_000_000


@pytest.fixture(autouse=True)
def no_leftover_workers():
    yield
    kill_leftovers()


def spec(kafka_options, topics, directory, *, late, interval, poll, policy="explicit", idle=None, partitions=1):
    source = {"name": "a", "topic": topics["a"], "fields": {"key": "int", "val": "int"}, "late": late,
              "policy": policy}
    if idle is not None:
        source["idle_timeout"] = idle
    return {
        "kafka_options": dict(kafka_options),
        "group_id": f"g-{topics['a']}",
        "flow": "echo",
        "inputs": [source],
        "outputs": [{"name": n, "topic": topics[n]} for n in ("echo_a", "counts")],
        "epoch": {"resolution_ns": MS},
        "dead_letter_topic": topics["dlq"],
        "max_poll_messages": poll,
        "worker": {"checkpoint_dir": str(directory), "checkpoint_interval": interval},
    }


def published(kafka_options, topic, until):
    """(record, time) -> diff over every final epoch up to ``until``, and the view there."""
    diffs = {}
    with ResultClient(topic, kafka_options) as client:
        for change in client.changes(timeout=60):
            for record, t, diff in change.updates:
                diffs[(record, t)] = diffs.get((record, t), 0) + diff
            if change.frontier is None or change.frontier >= until:
                break
        return {k: v for k, v in diffs.items() if v}, client.view


@pytest.mark.parametrize("late", ["advance", "reject"])
def test_an_update_behind_a_marker_is_classified_alike_live_and_in_a_replay(kafka_options, make_topic, tmp_path,
                                                                               late):
    """The issue's case: a checkpoint at 2 ms, then a marker at 5 ms immediately followed by an
    update at 3 ms. The second worker reads both in one poll; killed once 5 ms is published, the
    third replays from the 2 ms checkpoint one message per poll (so it closes the 5 ms epoch
    before it reads the update). Before the fix the second published the update at 3 ms and the
    third published it again at 5 ms (advance) or dead-lettered it (reject), and a later removal
    left the record at -1."""
    topics = {"a": make_topic("a"), "echo_a": make_topic("echo"), "counts": make_topic("counts"),
              "dlq": make_topic("dlq")}
    directory = tmp_path / "ckpt"
    raw = Producer(kafka_options)

    def send(*values):
        for value in values:
            raw.produce(topics["a"], value, partition=0)
        raw.flush(10)

    # the first worker checkpoints at 2 ms and stops
    send(encode_update([1, 1], 1 * MS, 1), encode_progress(2 * MS))
    first = WorkerProcess(spec(kafka_options, topics, directory, late=late, interval=0.01, poll=10))
    first.wait_ready()
    first.wait_frontier(2 * MS)
    assert first.terminate() == 0 and first.exit_frontier == 2 * MS, first.stderr[-2000:]
    # the second never checkpoints; it reads the marker and the update together
    second = WorkerProcess(spec(kafka_options, topics, directory, late=late, interval=3600.0, poll=100))
    second.wait_ready()
    assert second.restored == 2 * MS
    send(encode_progress(5 * MS), encode_update([2, 2], 3 * MS, 1))
    second.wait_frontier(5 * MS)
    time.sleep(0.3)  # whatever it does with the update is published by now, or never
    second.kill()
    assert second.proc.returncode == -signal.SIGKILL
    # the third replays from the 2 ms checkpoint, one message per poll
    third = WorkerProcess(spec(kafka_options, topics, directory, late=late, interval=3600.0, poll=1))
    third.wait_ready()
    assert third.restored == 2 * MS
    send(encode_progress(10 * MS), encode_update([2, 2], 12 * MS, -1), encode_progress(20 * MS))
    third.wait_frontier(20 * MS)
    assert third.terminate() == 0, third.stderr[-2000:]

    diffs, view = published(kafka_options, topics["echo_a"], 20 * MS)
    counts, count_view = published(kafka_options, topics["counts"], 20 * MS)
    if late == "advance":  # behind the partition's 5 ms marker: moved to it, once
        assert diffs == {((1, 1), 1 * MS): 1, ((2, 2), 5 * MS): 1, ((2, 2), 12 * MS): -1}
        assert view == {(1, 1): 1}
        assert count_view == {(1, 1): 1}
    else:  # rejected by both incarnations, never published; the removal shows as -1 on its own
        assert diffs == {((1, 1), 1 * MS): 1, ((2, 2), 12 * MS): -1}
        assert view == {(1, 1): 1, (2, 2): -1}
        dlq = read_topic(kafka_options["bootstrap.servers"], topics["dlq"], 1)
        letters = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in dlq]
        # once, though two incarnations read it: the third skips what the group's offsets say is written
        assert [(x.offset, x.reason) for x in letters] == [(3, "late")]
    assert all(v in (1, -1) for v in counts.values())


def test_an_idle_partitions_floor_is_replayed(kafka_options, make_topic, tmp_path):
    """Monotonic input, two partitions. Partition 1 goes idle and the worker's frontier passes
    it; then an update arrives on it behind that frontier and is advanced to it. A replay whose
    partition 1 never goes idle (a long idle timeout) reads that update before its frontier gets
    there: it must still advance it to the frontier recorded when partition 1 went idle, which the
    result topic already holds as final (before the fix the replay took it at its own time, below
    the final frontier, where the sink does not publish: the update was lost)."""
    topics = {"a": make_topic("a", partitions=2), "echo_a": make_topic("echo"), "counts": make_topic("counts"),
              "dlq": make_topic("dlq")}
    directory = tmp_path / "ckpt"
    raw = Producer(kafka_options)

    def send(partition, *values):
        for value in values:
            raw.produce(topics["a"], value, partition=partition)
        raw.flush(10)

    send(0, encode_update([1, 1], 1 * MS, 1))
    send(1, encode_update([2, 1], 1 * MS, 1))
    first = WorkerProcess(spec(kafka_options, topics, directory, late="advance", interval=0.01, poll=10,
                               policy="monotonic", idle=3600.0))
    first.wait_ready()
    send(0, encode_progress(2 * MS))
    send(1, encode_progress(2 * MS))
    first.wait_frontier(2 * MS)
    assert first.terminate() == 0 and first.exit_frontier == 2 * MS, first.stderr[-2000:]
    # partition 1 goes idle after 0.3 s; partition 0 moves on to 9 ms
    second = WorkerProcess(spec(kafka_options, topics, directory, late="advance", interval=3600.0, poll=10,
                                policy="monotonic", idle=0.3))
    second.wait_ready()
    assert second.restored == 2 * MS
    send(0, encode_update([3, 1], 5 * MS, 1), encode_progress(9 * MS))
    second.wait_frontier(9 * MS)
    send(1, encode_update([4, 1], 4 * MS, 1))  # behind 9 ms on the idle partition: advanced to 9 ms
    time.sleep(0.3)  # read (or not): its epoch cannot close before partition 0 moves on
    second.kill()
    # the replay: partition 1 never idles, so nothing but the recorded floor holds it at 9 ms
    third = WorkerProcess(spec(kafka_options, topics, directory, late="advance", interval=3600.0, poll=1,
                               policy="monotonic", idle=3600.0))
    third.wait_ready()
    assert third.restored == 2 * MS
    send(0, encode_progress(20 * MS))
    send(1, encode_progress(20 * MS))
    third.wait_frontier(20 * MS)
    assert third.terminate() == 0, third.stderr[-2000:]
    diffs, view = published(kafka_options, topics["echo_a"], 20 * MS)
    assert diffs == {((1, 1), 1 * MS): 1, ((2, 1), 1 * MS): 1, ((3, 1), 5 * MS): 1, ((4, 1), 9 * MS): 1}


def test_floor_log_reload_torn_line_and_compaction(tmp_path):
    from ddflow.daemon.input.floors import FloorLog

    path = tmp_path / "floors" / "t.log"
    log = FloorLog(path)
    log.record(0, 5, 100)
    log.record(0, 5, 300)  # the same offset raised again (an idle partition, epoch after epoch)
    log.record(0, 9, 200)
    log.record(1, 0, 50)
    log.persist()
    with open(path, "a") as f:
        f.write('{"p": 0, "o": 12, "t"')  # a crash while appending: nothing was published from it
    again = FloorLog(path)
    expected = {(0, 4): None, (0, 5): 300, (0, 8): 300, (0, 9): 300, (0, 12): 300, (1, 0): 50, (2, 7): None}
    for (p, o), t in expected.items():
        assert again.floor(p, o) == t == log.floor(p, o), (p, o)
    again.record(0, 12, 400)
    again.persist()
    assert FloorLog(path).floor(0, 12) == 400
    assert again.compact({0: 9}) == 1  # offset 5 is below every kept checkpoint's start
    reloaded = FloorLog(path)
    assert reloaded.since == {0: 9} and len(reloaded) == 3 and reloaded.floor(0, 9) == 200
    assert "were dropped" in reloaded.check_start(0, 3) and reloaded.check_start(0, 9) is None
