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


def test_every_exchange_step_records_its_wait_for_the_percentiles():
    """A worker keeps each exchange step's wait (`StepWaits`): one per step of every exchange point,
    the latest ``size`` of them, and their percentiles lie between the least and the most."""
    from ddflow.operators.nodes.exchange import Exchange
    from ddflow.operators.workers import StepWaits

    workers = Workers(2, lambda df: df.new_input("in").collection.count().capture())
    source = workers.input("in")
    for k in range(20):
        source.insert(k % 5, k)
        source.advance_to(k + 1)
        workers.run()
    for df in workers.dataflows:
        steps = sum(n.seq for n in df._all_nodes() if isinstance(n, Exchange))
        assert steps and df.worker.waits.count == steps
        kept = df.worker.waits._waits[:steps]
        assert kept.min() <= df.worker.waits.percentile(99) <= kept.max()
    waits = StepWaits(size=4)
    assert waits.percentile(50) is None
    for w in (9.0, 1.0, 2.0, 3.0, 4.0, 5.0):
        waits.add(w)
    assert waits.count == 6 and sorted(waits._waits) == [2.0, 3.0, 4.0, 5.0]  # the latest four
    assert waits.percentile(0) == 2.0 and waits.percentile(100) == 5.0


def test_a_collection_entered_into_a_loop_is_routed_before_it_enters():
    """With several workers, the edges reachability joins with inside its loop are exchanged in the
    enclosing scope (one step per pass there, not one per loop round), and so are the roots that
    start its variable: the loop's distinct routes each ``(node, root)`` by its node (keyed), so the
    variable is already where the join by node needs it and only that one exchange steps in the
    rounds. The result equals one dataflow's, and an epoch takes fewer exchange steps."""
    from ddflow.operators.nodes.exchange import Exchange

    def build(df):
        return reachability(df.new_input("roots").collection, df.new_input("edges").collection).capture()

    workers = Workers(2, build)
    exchanges = [n for n in workers.dataflows[0]._all_nodes() if isinstance(n, Exchange)]
    assert sorted((n.scope.depth, n.keyed) for n in exchanges) == [(1, False), (1, False), (2, True)]
    single = Dataflow()
    want = build(single)
    rng = random.Random(5)
    edges = [(rng.randrange(30), rng.randrange(30)) for _ in range(60)]
    roots, spread = workers.input("roots"), workers.input("edges")
    roots.insert(0, 0)
    single.inputs["roots"].insert(0, 0)
    for t, edge in enumerate(edges):
        for session in (spread, single.inputs["edges"]):
            session.insert(edge, t)
            if t >= 10:
                session.remove(edges[t - 10], t)
    for session in (roots, spread, single.inputs["roots"], single.inputs["edges"]):
        session.advance_to(len(edges))
    workers.run()
    single.run()
    got = workers.capture(lambda out: out)
    assert {r: d for r, d in got.at(len(edges) - 1).items() if d} == want.at(len(edges) - 1) != {}
    (rounds,) = [n.seq for n in exchanges if n.scope.depth == 2]  # one step per round
    assert all(n.seq < rounds / 2 for n in exchanges if n.scope.depth == 1)  # steps of the routed edges and roots


class CountingTransport(LocalTransport):
    """The in-process transport, counting the agreements made through it."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.gathers = 0

    def gather(self, worker, seq, value):
        if worker == 0:
            self.gathers += 1
        return super().gather(worker, seq, value)


def test_a_loops_later_rounds_are_agreed_on_its_exchange_steps():
    """With several workers a loop agrees its first round; each later one rides on the ballots of the
    exchange step the round makes anyway (one idle pass at the end tells that no worker has work).
    The same loop with an iteration limit agrees every round apart: the same rounds and results, with
    far more agreements."""
    from ddflow.operators.nodes.iterate import Loop

    def build(limit):
        def made(df):
            roots, edges = df.new_input("roots").collection, df.new_input("edges").collection
            start = roots.map(lambda r: (r, r))
            reach = start.iterate(
                lambda v: v.join_map(edges, lambda _n, root, dst: (dst, root)).concat(start).distinct(),
                max_iterations=limit)
            return reach.capture()
        return made

    runs = {}
    for limit in (None, 10**6):
        transport = CountingTransport(2)
        workers = Workers(2, build(limit), transport=transport)
        roots, edges = workers.input("roots"), workers.input("edges")
        roots.insert(0, 0)
        rng = random.Random(3)
        graph = [(rng.randrange(20), rng.randrange(20)) for _ in range(120)]
        for t, e in enumerate(graph):
            edges.insert(e, t)
            if t >= 60:
                edges.remove(graph[t - 60], t)
            roots.advance_to(t + 1)
            edges.advance_to(t + 1)
            workers.run()  # an epoch per change
        loop = next(n for n in workers.dataflows[0]._all_nodes() if isinstance(n, Loop))
        got = workers.capture(lambda out: out)
        runs[limit] = (transport.gathers, loop.rounds, {r: d for r, d in got.at(len(graph) - 1).items() if d})
    (ballots, rounds, view), (apart, rounds_apart, view_apart) = runs[None], runs[10**6]
    assert view == view_apart != {} and rounds == rounds_apart
    assert rounds > 2 * len(graph)  # several rounds per epoch
    assert apart - ballots >= rounds - len(graph)  # every round after an epoch's first is agreed on a ballot


def test_ballots_that_cannot_agree_a_round_fail_by_name():
    """A step whose other workers cast no ballot, a pass whose step counted none, and ballots agreeing
    a round before the pass's are errors, not a guess at the next round."""
    from ddflow.operators.errors import DataflowError
    from ddflow.operators.nodes.exchange import Exchange
    from ddflow.operators.transport import ABSTAIN, IDLE

    workers = Workers(2, graph_build)
    exchange = next(n for n in workers.dataflows[0]._all_nodes() if isinstance(n, Exchange))
    with pytest.raises(DataflowError, match="cast no ballot"):
        exchange._count(3, [ABSTAIN], 0)
    exchange._count(3, [IDLE], 0)
    assert exchange.agreed == 3
    exchange._count(IDLE, [IDLE], 0)
    assert exchange.agreed is None
    exchange.cast(4)
    with pytest.raises(DataflowError, match="made no step with a ballot"):
        exchange.agreed_after(4)
    exchange._count(2, [5], 0)
    with pytest.raises(DataflowError, match="agreed round 2 after a pass at round 4"):
        exchange.agreed_after(4)
