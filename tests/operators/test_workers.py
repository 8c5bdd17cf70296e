"""Several workers over the in-process exchange: ownership by the key hash, the exchange protocol
(epoch range and loop rounds on every batch, one marker per destination with the count sent), the
common clock, loops that end only when no worker has work, and failures that do not hang."""

from __future__ import annotations

import random

import pytest

from ddflow.operators import Dataflow, ShapeError
from ddflow.operators.errors import UserFunctionError
from ddflow.operators.library import reachability
from ddflow.operators.partition import key_hash
from ddflow.operators.transport import LocalTransport
from ddflow.operators.workers import Workers


class RecordingTransport(LocalTransport):
    """The in-process transport, keeping every batch and marker it carried."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.sent, self.marks = [], []

    def send(self, batch):
        self.sent.append(batch)
        super().send(batch)

    def mark(self, marker):
        self.marks.append(marker)
        super().mark(marker)


def graph_build(df: Dataflow):
    roots, edges = df.new_input("roots"), df.new_input("edges")
    reach = reachability(roots.collection, edges.collection)
    return reach.capture(), edges.collection.map(lambda e: e[0]).count().capture()


def feed_graph(roots, edges, rng, n=30, m=60):
    graph = [(rng.randrange(n), rng.randrange(n)) for _ in range(m)]
    roots.insert(0, 5)
    roots.insert(1, 7)
    for i, e in enumerate(graph):
        edges.insert(e, 10 + i)  # every update at its own nanosecond time
    roots.advance_to(1_000)
    edges.advance_to(1_000)
    return graph


def test_workers_equal_one_dataflow_at_every_time_and_own_their_keys():
    rng = random.Random(5)
    single = Dataflow()
    reach1, count1 = graph_build(single)
    feed_graph(single.inputs["roots"], single.inputs["edges"], rng)
    single.run()
    transport = RecordingTransport(3)
    workers = Workers(3, graph_build, transport=transport)
    feed_graph(workers.input("roots"), workers.input("edges"), random.Random(5))
    workers.run()
    reach, count = workers.capture(lambda o: o[0]), workers.capture(lambda o: o[1])
    for t in range(0, 80):
        assert reach.at(t) == reach1.at(t) and count.at(t) == count1.at(t)
    assert sorted(reach.updates) == sorted(reach1.updates)
    assert reach.frontier == [1_000]
    # count's arrangement is by the whole record: each (node, n) lives on the owner of node
    for i, out in enumerate(workers.outputs):
        for (node, _), _t, _d in out[1].updates:
            assert key_hash(node) % 3 == i
    assert all(len(out[1].updates) for out in workers.outputs)  # every worker owns some keys
    assert transport.updates > 0


def test_every_batch_names_its_epoch_and_round_and_each_destination_gets_one_marker_with_the_count():
    transport = RecordingTransport(2)
    workers = Workers(2, graph_build, transport=transport)
    feed_graph(workers.input("roots"), workers.input("edges"), random.Random(1))
    workers.run()
    sent: dict = {}
    for b in transport.sent:
        assert (b.lower, b.upper) == (None, 1_000) and len(b.records) == len(b.times) == len(b.diffs) > 0
        key = (b.channel, b.seq, b.source, b.dest)
        sent[key] = sent.get(key, 0) + len(b.diffs)
    marks = {(m.channel, m.seq, m.source, m.dest): m for m in transport.marks}
    assert len(marks) == len(transport.marks)  # one marker per step and destination
    assert all(marks[k].count == n for k, n in sent.items())
    assert all(m.count == 0 for k, m in marks.items() if k not in sent)
    for m in transport.marks:  # every step marks every other worker, work or not
        assert (m.channel, m.seq, 1 - m.source, m.source) in marks
    loop_rounds = {m.rounds for m in transport.marks if m.rounds}
    assert {r[0] for r in loop_rounds} >= {-1, 0, 1, 2}  # rounds inside the loop, and its closing step
    assert {m.rounds for m in transport.marks} >= {()}  # exchanges outside the loop too


def test_a_worker_without_input_runs_every_round_and_the_clock_is_the_meet():
    def build(df):
        roots, edges = df.new_input("roots"), df.new_input("edges")
        return reachability(roots.collection, edges.collection).capture()

    workers = Workers(2, build)
    first = workers.dataflows[0].inputs
    first["roots"].insert(0, 1)
    for i in range(20):  # a path 0 -> 1 -> ... -> 20, all read by worker 0
        first["edges"].insert((i, i + 1), 2 + i)
    first["roots"].advance_to(100)
    first["edges"].advance_to(100)
    second = workers.dataflows[1].inputs
    second["roots"].advance_to(50)  # worker 1 holds the clock back
    second["edges"].advance_to(60)
    workers.run()
    out = workers.capture(lambda c: c)
    assert out.frontier == [50]
    assert out.at(49) == {(0, n): 1 for n in range(21)}
    assert out.at(10) == {(0, n): 1 for n in range(10)}
    second["roots"].close()
    second["edges"].close()
    workers.run()
    assert out.frontier == [100]
    assert sum(len(c.updates) for c in out.captures) == 21
    assert all(len(c.updates) for c in out.captures)  # the results are spread over both workers


def test_a_failing_worker_fails_the_run_instead_of_hanging():
    def build(df):
        data = df.new_input("data")

        def boom(kv):
            if kv[0] == 13:
                raise RuntimeError("user function failed on 13")
            return kv

        return data.collection.count().map(boom).capture()

    workers = Workers(3, build)
    data = workers.input("data")
    for i in range(30):
        data.insert(i, i)
    data.advance_to(100)
    with pytest.raises(UserFunctionError, match="user function failed on 13") as raised:
        workers.run()
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_keys_without_a_stable_hash_are_refused_by_name():
    class Opaque:
        def __hash__(self):
            return 1

    def build(df):
        return df.new_input("data").collection.map(lambda x: (Opaque(), x)).reduce(
            lambda k, vals: [(len(vals), 1)]).capture()

    workers = Workers(2, build)
    workers.input("data").insert(1, 0)
    workers.input("data").advance_to(10)
    with pytest.raises(ShapeError, match="Opaque value .* has no stable key hash"):
        workers.run()


def test_update_many_deals_columns_to_the_workers():
    import numpy as np

    def build(df):
        return df.new_input("data").collection.map(lambda x: x % 7).count().capture()

    workers = Workers(3, build)
    data = workers.input("data")
    data.insert(100, 0)  # the round-robin goes on from here
    data.update_many(np.arange(1000), np.arange(1000) + 1, np.ones(1000, dtype=np.int64))
    data.update_many([(1000 + i) for i in range(10)], [2000] * 10, [1] * 10)
    data.advance_to(5000)
    assert all(len(s._node.chunks) >= 2 for s in data.sessions)  # columns, not one record at a time
    workers.run()
    want: dict = {}
    for x in [100, *range(1000), *range(1000, 1010)]:
        want[x % 7] = want.get(x % 7, 0) + 1
    assert workers.capture(lambda c: c).at(4999) == {(k, n): 1 for k, n in want.items()}


def test_exchanges_send_only_complete_updates_so_batches_lie_in_their_epoch():
    transport = RecordingTransport(2)

    def build(df):
        return df.new_input("data").collection.count().capture()

    workers = Workers(2, build, transport=transport)
    data = workers.input("data")
    for i in range(40):
        data.insert(i, 10 + i)  # times 10..49
    data.advance_to(30)  # 30..49 are not complete yet
    workers.run()
    assert transport.sent and all((b.times < 30).all() for b in transport.sent)
    assert workers.capture(lambda c: c).at(29) == {(i, 1): 1 for i in range(20)}
    before = len(transport.sent)
    data.advance_to(100)
    workers.run()
    later = transport.sent[before:]
    assert later and all(((b.times >= 30) & (b.times < 100)).all() and (b.lower, b.upper) == (30, 100) for b in later)
    assert workers.capture(lambda c: c).at(99) == {(i, 1): 1 for i in range(40)}


def test_ints_and_int_pairs_travel_as_columns_and_other_values_as_themselves():
    import numpy as np

    transport = RecordingTransport(2)
    ints, pairs = [7, -3, 2**62 - 1, 0], [(1, 2), (-(2**61), 5), (1, 3)]
    mixed = [None, 1.5, 2**70, "s", ((1, 2), 3), (1, "x"), 9]

    def build(df):
        a, b, c = (df.new_input(n).collection for n in ("ints", "pairs", "mixed"))
        return a.count().capture(), b.min().capture(), c.count().capture()

    workers = Workers(2, build, transport=transport)
    for name, records in (("ints", ints), ("pairs", pairs), ("mixed", mixed)):
        session = workers.input(name)
        for i, r in enumerate(records * 3):
            session.insert(r, i)
        session.advance_to(1000)
    workers.run()
    assert workers.capture(lambda o: o[0]).at(999) == {(r, 3): 1 for r in ints}
    assert workers.capture(lambda o: o[1]).at(999) == {(1, 2): 1, (-(2**61), 5): 1}
    assert workers.capture(lambda o: o[2]).at(999) == {(r, 3): 1 for r in mixed}
    got = {type(r[0]).__name__ for out in workers.outputs for r in out[2].at(999)}
    assert got == {"NoneType", "float", "int", "str", "tuple"}  # values keep their types across workers
    kinds = {(isinstance(b.records, np.ndarray), getattr(b.records, "ndim", 0)) for b in transport.sent}
    assert kinds == {(True, 1), (True, 2), (False, 0)}  # int columns, pair columns, lists of values


@pytest.mark.parametrize("seed", [1, 2])
def test_a_worker_restored_from_its_state_alone_goes_on_as_if_never_stopped(seed):
    """Worker 1 of 2 is rebuilt from what it held at a frontier F (the inputs it was fed, what its
    exchange points emitted: the keys it owns, and its position in the common sequence) while
    worker 0 keeps its dataflow; restoring makes no agreement and exchanges nothing, and afterwards
    both go on: every output at every later time equals one Dataflow's (reachability: loops)."""
    from ddflow.operators.workers import worker_dataflow

    rng = random.Random(seed)
    batches, alive = [], []
    for e in range(6):  # edges removed only after an epoch inserted them (loops over negative counts need not end)
        batch, added = [], []
        for k in range(25):
            if alive and rng.random() < 0.3:
                batch.append((alive.pop(rng.randrange(len(alive))), 10 * e + k % 10, -1))
            else:
                added.append((rng.randrange(20), rng.randrange(20)))
                batch.append((added[-1], 10 * e + k % 10, 1))
        alive.extend(added)
        batches.append(batch)
    single = Dataflow()
    want = graph_build(single)
    workers = Workers(2, graph_build)
    fed_to_one: list = []  # what worker 1's own input session was given

    def feed(e: int) -> None:
        for k, (record, t, d) in enumerate(batches[e]):
            single.inputs["edges"].update(record, t, d)
            target = workers.dataflows[k % 2]
            target.inputs["edges"].update(record, t, d)
            if k % 2:
                fed_to_one.append((record, t, d))
        for df in [single, *workers.dataflows]:
            df.inputs["edges"].advance_to(10 * (e + 1))
            df.inputs["roots"].advance_to(10 * (e + 1))

    for df in [single, workers.dataflows[0]]:
        df.inputs["roots"].insert(0, 0)
    for e in range(3):
        feed(e)
        single.run()
        workers.run()
    frontier = 30
    old = workers.dataflows[1]
    states = [(old.interner.value_list(ids), times, diffs) for ids, times, diffs in old.worker.states(frontier)]
    position = old.worker.position()
    assert position["upper"] == frontier and position["agreements"] > 0 and any(position["steps"])
    assert sum(len(s[0]) for s in states) > 0
    fresh = worker_dataflow(1, 2, workers.transports[1])
    outputs = graph_build(fresh)
    base: dict = {}
    for record, _, d in fed_to_one:
        base[record] = base.get(record, 0) + d
    records = [r for r, c in base.items() if c]
    fresh.inputs["edges"].update_many(records, [frontier - 1] * len(records), [base[r] for r in records])
    for name in ("edges", "roots"):
        fresh.inputs[name].advance_to(frontier)
    fresh.worker.restore([(fresh.interner.ids(values), times, diffs) for values, times, diffs in states])
    fresh.run()  # alone: worker 0 is not running
    fresh.worker.resume(position)
    workers.dataflows[1], workers.outputs[1] = fresh, outputs
    for e in range(3, 6):
        feed(e)
        single.run()
        workers.run()
    for k in range(2):
        got = workers.capture(lambda out, k=k: out[k])
        for t in range(frontier, 60, 3):
            assert got.at(t) == want[k].at(t), (k, t)
