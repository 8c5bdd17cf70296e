"""Workers exchanging through Kafka topics on the real broker: the same results as one dataflow,
every step's batches and markers on the exchange topics, and a worker that never comes is reported
by name instead of waited for forever."""

from __future__ import annotations

import random
import time
import uuid

import pytest

from ddflow.daemon.cluster.transport import ExchangeTimeout, KafkaTransport
from ddflow.operators import Dataflow
from ddflow.operators.library import reachability
from ddflow.operators.workers import Workers


def build(df: Dataflow):
    roots, edges = df.new_input("roots"), df.new_input("edges")
    labels = edges.collection.map(lambda e: (e[0], f"n{e[1]}")).reduce(lambda k, vals: [(len(vals), 1)])
    return reachability(roots.collection, edges.collection).capture(), labels.capture()


def feed(roots, edges, graph, start, end):
    for i, e in enumerate(graph[start:end]):
        edges.insert(e, 10 * start + i)
    roots.advance_to(10 * end)
    edges.advance_to(10 * end)


def test_two_workers_through_exchange_topics_equal_one_dataflow(kafka_options):
    rng = random.Random(3)
    graph = [(rng.randrange(25), rng.randrange(25)) for _ in range(60)]
    single = Dataflow()
    want = build(single)
    single.inputs["roots"].insert(0, 0)
    prefix, run = f"ex-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    ends = [KafkaTransport(2, i, kafka_options, prefix=prefix, run=run, timeout=60) for i in range(2)]
    workers = Workers(2, build, transport=ends)
    roots, edges = workers.input("roots"), workers.input("edges")
    roots.insert(0, 0)
    try:
        for start, end in ((0, 30), (30, 60)):
            feed(single.inputs["roots"], single.inputs["edges"], graph, start, end)
            single.run()
            feed(roots, edges, graph, start, end)
            workers.run()
            for k in range(2):
                got = workers.capture(lambda out, k=k: out[k])
                assert got.frontier == [10 * end]
                for t in range(0, 10 * end, 7):
                    assert got.at(t) == want[k].at(t)
        assert all(e.sent_messages and e.received_messages for e in ends)
        assert sum(len(c[0].updates) > 0 for c in workers.outputs) == 2  # both workers own results
    finally:
        for e in ends:
            e.close()


def test_a_missing_worker_is_named_after_the_timeout(kafka_options):
    end = KafkaTransport(2, 0, kafka_options, prefix=f"ex-{uuid.uuid4().hex[:8]}", run="r", timeout=2)
    try:
        with pytest.raises(ExchangeTimeout, match=r"agreement 0: worker 0 waited 2 s for workers \[1\]"):
            end.gather(0, 0, True)
        assert set(end.waited) == {1} and end.waited[1] >= 1.9  # the whole wait is charged to worker 1
        assert end.waiting_on == ()  # no longer waiting once the step gave up
    finally:
        end.close()


def test_workers_in_separate_processes_equal_one_dataflow(kafka_broker):
    import json
    import subprocess
    import sys

    import run_exchange_worker as script

    single = Dataflow()
    roots, edges, want = script.build(single)
    roots.insert(0, 0)
    graph = script.stream()
    for start, end in ((0, 40), (40, 80)):
        for k in range(start, end):
            edges.insert(graph[k], 10 * k)
        roots.advance_to(10 * end)
        edges.advance_to(10 * end)
        single.run()
    prefix, run = f"ex-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    procs = [subprocess.Popen([sys.executable, script.__file__, kafka_broker.bootstrap, prefix, run, str(i), "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert all(r["frontier"] == [800] for r in results)
    union: dict = {}
    for r in results:
        for record, t, d in r["updates"]:
            union[(tuple(record), t)] = union.get((tuple(record), t), 0) + d
    assert {k: d for k, d in union.items() if d} == {(r, t): d for r, t, d in want.updates}
    assert all(r["updates"] for r in results)  # both processes own part of the output


def batch_of(seq, source, dest, values):
    import numpy as np

    from ddflow.operators.transport import ExchangeBatch, ExchangeMarker

    n = len(values)
    return (ExchangeBatch(0, seq, source, dest, 0, 10, (), np.asarray(values, dtype=np.int64),
                          np.zeros((n, 1), dtype=np.int64), np.ones(n, dtype=np.int64)),
            ExchangeMarker(0, seq, source, dest, 0, 10, (), n))


def joined(zero, other, *args, **kwargs):
    """``other.join(...)`` while worker 0 reads its topics (it answers the hello as a running worker does)."""
    import threading

    result = []
    thread = threading.Thread(target=lambda: result.append(other.join(*args, **kwargs)))
    thread.start()
    while thread.is_alive():
        zero.voted(10**9)
        thread.join(0.01)
    assert result, "join failed"
    return result[0]


def test_a_restarted_worker_replays_the_first_decided_votes_and_steps(kafka_options):
    """Worker 1 votes and sends, then restarts (a new incarnation of the same generation): re-reading
    the topics it takes every agreement as first decided (its own earlier vote too) and every step
    as first sent; what it re-sends is dropped by worker 0, who is past those steps."""
    prefix = f"ex-{uuid.uuid4().hex[:8]}"
    zero = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
    one = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
    again = None
    try:
        assert zero.join() is False  # worker 0 has no checkpoint: a new generation
        assert joined(zero, one) is False and one.generation == zero.generation and one.start == zero.start
        # worker 1 votes in agreement 0 and dies before the others voted (as gather sends a vote)
        one._produce(one._agree, 0, {"kind": "vote", "seq": 0, "source": 1, "value": "first"})
        b, m = batch_of(0, 1, 0, [1, 2, 3])
        one.send(b)
        one.mark(m)
        one.close()
        assert zero.gather(0, 0, "zero") == ["zero", "first"]
        assert [len(x.diffs) for x in zero.receive(0, 0, 0)] == [3]
        again = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
        assert joined(zero, again) is False and again.generation == zero.generation  # fresh: it replays from the start
        deadline = time.monotonic() + 20
        while not again.voted(0):  # what has arrived so far, without waiting: it shows once read
            assert time.monotonic() < deadline
        assert again.gather(1, 0, "second") == ["zero", "first"]  # its own first vote wins
        b, m = batch_of(0, 1, 0, [7])
        again.send(b)  # a re-sent step: worker 0 received step 0 already
        again.mark(m)
        b, m = batch_of(1, 1, 0, [4, 5])
        again.send(b)
        again.mark(m)
        [got] = zero.receive(0, 0, 1)
        assert got.records.tolist() == [4, 5]
        assert not zero._boxes  # the re-sent step 0 was dropped on arrival, not kept
    finally:
        zero.close()
        if again is not None:
            again.close()


def test_a_new_generation_of_worker_0_voids_the_others(kafka_options):
    from ddflow.daemon.cluster.transport import GenerationChanged

    prefix = f"ex-{uuid.uuid4().hex[:8]}"
    zero = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
    one = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
    restarted = None
    try:
        zero.join()
        joined(zero, one)
        assert joined(zero, one, one.generation, start=one.start, agree_offset=one.start) is True  # its checkpoint's
        restarted = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
        restarted.join()  # worker 0 lost its state: a new generation
        assert restarted.generation != zero.generation
        with pytest.raises(GenerationChanged, match="worker 0 started generation"):
            one.gather(1, 5, "x")
    finally:
        for t in (zero, one, restarted):
            if t is not None:
                t.close()


def test_the_generation_names_what_it_started_from(kafka_options):
    """Worker 0 announces the snapshot a new generation starts from (its identity, None: empty
    inputs); every joining worker learns it, and a known generation keeps what it recorded."""
    from ddflow.daemon.cluster.transport import UNKNOWN

    prefix = f"ex-{uuid.uuid4().hex[:8]}"
    zero = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
    one = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
    again = older = None
    try:
        zero.join(origin="1000@abc")
        joined(zero, one)
        assert zero.origin == one.origin == "1000@abc"
        again = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
        again.join(zero.generation, start=zero.start, origin=None)  # a generation that began empty
        older = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
        joined(again, older)
        assert older.generation == zero.generation and older.origin is None
        unknown = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
        try:
            unknown.join(zero.generation, start=zero.start)  # recorded before origins were: not announced
            late = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30)
            try:
                joined(unknown, late)
                assert late.origin == UNKNOWN
            finally:
                late.close()
        finally:
            unknown.close()
    finally:
        for t in (zero, one, again, older):
            if t is not None:
                t.close()


def test_a_replaying_worker_holds_only_the_steps_it_is_at(kafka_options):
    """A worker replaying a long exchange history reads ahead only up to the steps it is at: what
    lies further is read again from its offset when the worker gets there (nothing is lost, and a
    checkpoint taken meanwhile records where to re-read from). Without the bound the whole history
    would be held (shown by a transport that reads ahead without limit)."""
    prefix = f"ex-{uuid.uuid4().hex[:8]}"
    steps = 300
    zero = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30)
    replays = []
    try:
        zero.join()
        for seq in range(steps):  # worker 0 ran ahead: 300 steps wait in worker 1's partition
            b, m = batch_of(seq, 0, 1, [seq, seq + 1])
            zero.send(b)
            zero.mark(m)
        zero.producer.flush(10)
        for read_ahead in (2, 10**9):
            one = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30, read_ahead=read_ahead)
            replays.append(one)
            assert joined(zero, one) is False  # fresh: it replays the exchange topic from its start
            time.sleep(0.5)  # the broker has every step ready to be fetched
            for seq in range(steps):
                [got] = one.receive(1, 0, seq)
                assert got.records.tolist() == [seq, seq + 1]
                if read_ahead == 2 and seq % 37 == 0:
                    assert one.positions()["exchange"][0] <= 2 * (seq + 1)  # re-read from the next step at most
            one.close()
        bounded, unbounded = replays
        print(f"exchange messages held at most: {bounded.peak_held} reading 2 steps ahead, {unbounded.peak_held} "
              f"without a bound ({2 * steps} in the partition)")
        assert bounded.peak_held <= 2 * 2 and bounded.held == 0  # a batch and a marker per step, 2 steps
        assert unbounded.peak_held > 100, unbounded.peak_held
    finally:
        zero.close()


def test_a_replaying_worker_holds_only_the_agreements_it_is_at(kafka_options):
    """The same for the agree topic: a worker replaying 300 agreements holds the votes of at most
    two of them, and takes each as first decided (its earlier run's vote included)."""
    prefix = f"ex-{uuid.uuid4().hex[:8]}"
    count = 300
    # the votes are written here, not agreed (a test's shortcut): worker 0 reads them without a bound
    zero = KafkaTransport(2, 0, kafka_options, prefix=prefix, run="r", timeout=30, read_ahead=10**9)
    replays = []
    try:
        zero.join()
        for seq in range(count):  # 300 agreements made: worker 0's votes and those of worker 1's earlier run
            zero._produce(zero._agree, 0, {"kind": "vote", "seq": seq, "source": 0, "value": [seq]})
            zero._produce(zero._agree, 0, {"kind": "vote", "seq": seq, "source": 1, "value": "first"})
        zero.producer.flush(10)
        for read_ahead in (2, 10**9):
            one = KafkaTransport(2, 1, kafka_options, prefix=prefix, run="r", timeout=30, read_ahead=read_ahead)
            replays.append(one)
            assert joined(zero, one) is False
            time.sleep(0.5)
            for seq in range(count):
                assert one.gather(1, seq, "again") == [[seq], "first"]  # as first decided
            assert one.positions()["agree"] >= count  # past every vote of worker 0
            one.close()
        bounded, unbounded = replays
        print(f"votes held at most: {bounded.peak_held} reading 2 agreements ahead, {unbounded.peak_held} without a "
              "bound")
        assert bounded.peak_held <= 2 * 2 and bounded.held == 0
        assert unbounded.peak_held > 100, unbounded.peak_held
    finally:
        zero.close()
