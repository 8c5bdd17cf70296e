"""Workers exchanging through Kafka topics on the real broker: the same results as one dataflow,
every step's batches and markers on the exchange topics, and a worker that never comes is reported
by name instead of waited for forever."""

from __future__ import annotations

import random
import uuid

import pytest

from ddflow.daemon.exchange import ExchangeTimeout, KafkaTransport
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
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
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
