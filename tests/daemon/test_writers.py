"""Result topics with several writers: each of W workers marks every partition for itself; a range is
final once all W writers marked it; re-sent epochs are dropped per writer; old markers mean 1 writer."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ddflow.daemon.exceptions import ProtocolError
from ddflow.daemon.kafka.companion import _CompanionFollower
from ddflow.daemon.kafka.following import CLOSED, ProtocolStats, _Follower
from ddflow.daemon.formats import encoder, reader
from ddflow.daemon.kafka.results import ResultClient, read_result_positions
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.formats.result_protocol import decode_output, encode_output_progress, encode_output_updates


def batch(lower, upper, inc, updates):
    return encode_output_updates(lower, upper, inc, updates, "out")


def marker(lower, upper, inc, count, writer=None):
    return encode_output_progress(lower, upper, inc, count, writer)


def follower(partitions=1):
    return _Follower("out", partitions, keep_view=True, stats=ProtocolStats())


def test_markers_name_the_writer_only_when_there_are_several():
    assert decode_output(marker(0, 10, "a", 3)).writers == 1
    one = msgpack_keys(marker(0, 10, "a", 3, (0, 1)))
    assert "writer" not in one and "writers" not in one  # a single writer's markers are unchanged
    m = decode_output(marker(0, 10, "a", 3, (1, 2)))
    assert (m.writer, m.writers) == (1, 2)


def msgpack_keys(value):
    import msgpack

    return set(msgpack.unpackb(value, raw=False))


def test_a_range_is_final_once_every_writer_marked_it():
    f = follower()
    f.apply(0, 0, batch(T_MIN, 10, "w0", [(("a",), 3, 1)]))
    assert f.apply(0, 1, marker(T_MIN, 10, "w0", 1, (0, 2))) is None  # writer 1 has not marked it
    assert f.view == {} and f.partitions[0].finals == [10, T_MIN]
    f.apply(0, 2, batch(T_MIN, 6, "w1", [(("b",), 5, 2)]))
    change = f.apply(0, 3, marker(T_MIN, 6, "w1", 1, (1, 2)))
    assert change is not None and change.frontier == 6 and change.updates == [(("a",), 3, 1), (("b",), 5, 2)]
    # writer 1 goes on with other boundaries; writer 0's [6, 10) was staged already
    f.apply(0, 4, batch(6, 12, "w1", [(("b",), 11, -2)]))
    change = f.apply(0, 5, marker(6, 12, "w1", 1, (1, 2)))
    assert change.frontier == 10 and change.updates == [] and f.view == {("a",): 1, ("b",): 2}
    f.apply(0, 6, marker(10, 20, "w0", 0, (0, 2)))
    assert f.frontier == 12 and f.view == {("a",): 1}


def test_re_sent_epochs_are_dropped_per_writer():
    f = follower()
    f.apply(0, 0, batch(T_MIN, 10, "w0", [(("a",), 3, 1)]))
    f.apply(0, 1, marker(T_MIN, 10, "w0", 1, (0, 2)))
    # writer 0 restarted (a new incarnation) and re-sends the same range cut otherwise: dropped
    f.apply(0, 2, batch(T_MIN, 5, "w0b", [(("a",), 3, 1)]))
    f.apply(0, 3, marker(T_MIN, 5, "w0b", 1, (0, 2)))
    # writer 1's epoch is still to come: writer 0's marks do not complete it
    assert f.frontier == T_MIN and f.stats.duplicate_epochs == 1
    f.apply(0, 4, batch(T_MIN, 10, "w1", [(("c",), 9, 1)]))
    f.apply(0, 5, marker(T_MIN, 10, "w1", 1, (1, 2)))
    f.apply(0, 6, batch(T_MIN, 10, "w1b", [(("c",), 9, 1)]))  # and writer 1's re-sent epoch
    f.apply(0, 7, marker(T_MIN, 10, "w1b", 1, (1, 2)))
    assert f.frontier == 10 and f.view == {("a",): 1, ("c",): 1} and f.stats.duplicate_epochs == 2


def test_a_pending_epoch_of_one_writer_survives_another_writers_marker():
    """Writer 1's batches for a range wait for its own marker, whatever writer 0 marks meanwhile."""
    f = follower()
    f.apply(0, 0, batch(T_MIN, 10, "w1", [(("b",), 4, 1)]))
    f.apply(0, 1, marker(T_MIN, 10, "w0", 0, (0, 2)))
    f.apply(0, 2, marker(10, 20, "w0", 0, (0, 2)))
    f.apply(0, 3, marker(T_MIN, 10, "w1", 1, (1, 2)))
    assert f.frontier == 10 and f.view == {("b",): 1}


def test_old_markers_without_writers_mean_one_writer():
    f = follower()
    f.apply(0, 0, batch(T_MIN, 10, "old", [(("a",), 1, 1)]))
    assert f.apply(0, 1, marker(T_MIN, 10, "old", 1)).frontier == 10


def test_protocol_errors_name_the_writer():
    f = follower()
    f.apply(0, 0, marker(T_MIN, 10, "w0", 0, (0, 2)))
    with pytest.raises(ProtocolError, match="final frontier 10 of writer 0: epochs are missing"):
        f.apply(0, 1, marker(20, 30, "w0", 0, (0, 2)))
    with pytest.raises(ProtocolError, match="marked as writer 1, before as 0"):
        f.apply(0, 2, marker(T_MIN, 40, "w0", 0, (1, 2)))
    import msgpack

    bad = msgpack.packb({"lower": 0, "upper": 1, "incarnation": "x", "count": 0, "writer": 2, "writers": 2})
    with pytest.raises(ProtocolError, match="writer 2 of 2 writers"):
        follower().apply(0, 0, bad)


def test_companion_markers_name_their_writer():
    enc = encoder("json", "out", "data", fields=["k", "n"], progress_topic="progress")
    f = _CompanionFollower("data", 1, "progress", 1, reader("json", ["k", "n"]), keep_view=True, stats=ProtocolStats())

    def epoch(lower, upper, inc, updates, writer):
        data, mark = enc.epoch(lower, upper, inc, 0, updates, writer)
        changes = [f.take("data", 0, 0, m[3], m[4]) for m in data]
        return [c for c in changes + [f.take("progress", 0, 0, mark[3], None)] if c is not None]

    assert epoch(T_MIN, 10, "w0", [(("x", 1), 2, 1)], (0, 2)) == []
    [change] = epoch(T_MIN, 10, "w1", [(("y", 2), 3, 1)], (1, 2))
    assert change.frontier == 10 and f.view == {("x", 1): 1, ("y", 2): 1}
    assert epoch(T_MIN, 10, "w1b", [(("y", 2), 3, 1)], (1, 2)) == []  # a re-sent epoch of writer 1
    assert f.view == {("x", 1): 1, ("y", 2): 1}


@pytest.mark.kafka
@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_two_sinks_writing_one_topic_give_the_exact_view(kafka_options, make_topic, fmt):
    """Two writers with their own transactional ids and epoch boundaries: the client's view at every
    frontier is what both wrote below it; a restarted writer resumes from what it published itself."""
    topic = make_topic("out", partitions=3)
    progress = make_topic("progress") if fmt == "json" else None
    fields = ["k", "n"] if fmt == "json" else None
    rng = random.Random(5)
    updates = [[((f"k{rng.randrange(9)}", w), rng.randrange(0, 60), rng.choice([1, 2, -1])) for _ in range(40)]
               for w in range(2)]
    bounds = [[10, 30, 45, 60], [25, 60]]

    def sink(w):
        s = KafkaSink([OutputSpec("out", topic, format=fmt, fields=fields, progress_topic=progress)], kafka_options,
                      transactional_id=f"tx-{topic}-{w}", writer=(w, 2))
        s.open()
        return s

    for w in range(2):
        s = sink(w)
        lower = T_MIN
        for upper in bounds[w][:-1]:
            s.publish(lower, upper, {"out": [u for u in updates[w] if lower <= u[1] < upper]})
            lower = upper
        s.close()
    s = sink(1)  # writer 1 restarted: it knows what it published, not what writer 0 did
    assert s.final[topic] == [25] * 3
    s.close()
    finals, _ = read_result_positions([topic], kafka_options, formats={topic: (fmt, progress)} if progress else None)
    assert finals[topic] == [25] * 3  # every writer's
    with ResultClient(topic, kafka_options, format=fmt, progress_topic=progress, fields=fields) as client:
        assert client.wait_for(25, timeout=20) and not client.wait_for(30, timeout=1)
        assert client.view == accumulate(updates[0] + updates[1], 25)
        for w in range(2):  # the last epochs: 60 is final once both marked it
            s = sink(w)
            lower = bounds[w][-2]
            s.publish(lower, 60, {"out": [u for u in updates[w] if lower <= u[1] < 60]})
            s.close()
        assert client.wait_for(60, timeout=20)
        assert client.view == accumulate(updates[0] + updates[1], 60)
        assert client.partition_frontiers == [60] * 3


def accumulate(updates, below):
    view = Counter()
    for record, t, diff in updates:
        if t < below:
            view[record] += diff
    return {r: c for r, c in view.items() if c}


def test_closed_writers():
    f = follower()
    f.apply(0, 0, marker(T_MIN, None, "w0", 0, (0, 2)))
    assert f.frontier == T_MIN
    f.apply(0, 1, marker(T_MIN, None, "w1", 0, (1, 2)))
    assert f.frontier == CLOSED
