"""The compiled reduce tactic against the general one (the reference) on the same random input:
every reduction at depth 1, inside a loop (depth 2) and inside a doubly nested loop (depth 3), fed
epoch by epoch to two dataflows that differ only in the tactic their reductions may use; their
outputs must be the same updates after every run. The compiled tactic must have evaluated rounds at
each depth (where it applies: rounds whose candidates share their inner coordinates), keeping its
keys' histories between rounds from rounds of one key on, and read kept histories at each depth."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_harness import sources

from ddflow.operators import Dataflow
from ddflow.operators.nodes.reduce.node import Reduce
from ddflow.operators.tuning import EngineConfig

pairs = st.tuples(st.integers(0, 3), st.integers(-3, 4))


def _reductions(c):
    return [c.min(), c.max(), c.sum(), c.top_k(2), c.count(), c.distinct(),
            c.map(lambda kv: kv[1]).threshold(lambda r, n: n * n if r % 2 else int(n > 1)),
            c.reduce(lambda k, vals: [(vals[0][0] * 10 + len(vals), 1)])]


def depth1(c):
    return _reductions(c)


def depth2(c):
    def capped(v):  # values rise to a cap of 4 and stay: a fixed point in a few rounds
        return v.map(lambda kv: (kv[0], min(kv[1] + 1, 4)))

    d = c.distinct()  # positive multiplicities: monotone bodies, which reach their fixed points
    return [d.iterate(lambda v: capped(v).concat(d).max()),
            d.iterate(lambda v: capped(v).concat(d).top_k(2)),
            c.iterate(lambda v: v.map(lambda kv: ((kv[0] + 1) % 4, kv[1])).concat(c).min()),
            c.map(lambda kv: kv[0]).iterate(lambda v: v.map(lambda x: (x + 1) % 4).concat(v).distinct()),
            d.iterate(lambda v: capped(v).concat(d).reduce(lambda k, vals: [(max(v for v, _ in vals), 1)]))]


def depth3(c):
    def inner(y):
        return y.iterate(lambda z: z.map(lambda kv: ((kv[0] + 1) % 4, kv[1])).concat(y).min())

    def inner_distinct(y):
        return y.iterate(lambda z: z.map(lambda x: (x * 2) % 5).concat(y).distinct())

    d = c.distinct()
    return [d.iterate(lambda y: inner(y).map(lambda kv: (kv[0], min(kv[1] + 1, 3))).concat(d).max()),
            c.map(lambda kv: kv[1] % 5).iterate(lambda y: inner_distinct(y).map(lambda x: (x + 1) % 5)
                                                .concat(y).distinct())]


def build(pipeline, compiled: bool):
    df = Dataflow(config=EngineConfig(reduce_history_keys=1) if compiled else None)
    session = df.new_input("xs")
    probes = [out.capture() for out in pipeline(session.collection)]
    reduces = [n for n in df._all_nodes() if isinstance(n, Reduce)]
    for node in reduces:
        node.compiled = compiled
    return df, session, probes, reduces


compiled_rounds: Counter = Counter()


SLOW = pytest.mark.slow  # depths 2 and 3 take the full suite: 25 examples each, 20 of the quick run's CPU s


@pytest.mark.parametrize("depth, pipeline", [(1, depth1), pytest.param(2, depth2, marks=SLOW),
                                             pytest.param(3, depth3, marks=SLOW)])
def test_compiled_tactic_equals_general(depth, pipeline):
    @settings(max_examples=25)
    @given(sources(pairs, max_epochs=6, max_per_epoch=8))
    def check(srcs):
        fast, reference = build(pipeline, True), build(pipeline, False)
        source = srcs[0]
        for epoch in source.epochs:
            for df, session, _, _ in (fast, reference):
                epoch.feed(session)
                df.run()
            got = [Counter(p.updates) for p in fast[2]]
            want = [Counter(p.updates) for p in reference[2]]
            assert got == want
        assert sum(n.rounds_compiled for n in reference[3]) == 0
        for n in fast[3]:
            compiled_rounds[(depth, n.scope.depth)] += n.rounds_compiled
            compiled_rounds[("kept", n.scope.depth)] += n.rows_kept

    check()
    assert compiled_rounds[(depth, depth)] > 0, f"the compiled tactic never ran at depth {depth}"
    assert compiled_rounds[("kept", depth)] > 0, f"no compiled round read kept histories at depth {depth}"


def test_sums_beyond_int64_fall_back_to_exact_python_sums():
    """A sum the kernel cannot hold in int64 is summed exactly in Python (its record is a Python int)."""
    df = Dataflow()
    xs = df.new_input("xs")
    probe = xs.collection.sum().capture()
    big = (1 << 61) + 1
    for i in range(8):
        xs.update((0, big), i, 1)
    xs.update((1, -big), 3, 2)
    xs.advance_to(8)
    df.run()
    assert probe.at(7) == {(0, 8 * big): 1, (1, -2 * big): 1}
    assert probe.at(2) == {(0, 3 * big): 1}

