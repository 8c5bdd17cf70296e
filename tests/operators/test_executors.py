"""The plan executor (``EngineConfig(executor="plan")``) against the reference (``"nodes"``).

Both run the same random streams through the same graphs: loops nested 1, 2 and 3 deep, with
retractions and negative multiplicities (the loop bodies converge whatever the signs: they shift
records up to a bound, or take ``distinct`` of non-negative inputs), on 1, 2 and 3 in-process
workers. The accumulated output must agree at every time of every epoch, and both must have run
the same epochs to completion (the same output frontier).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.plan import KIND, check, lower
from ddflow.operators.testing import accumulate_at
from ddflow.operators.tuning import EngineConfig
from ddflow.operators.workers import Workers

BOUND = 6  # the records a loop shifts stop at this value


def shifted(xs):
    """Depth 1: ``(k, v)`` records and every ``(k, v + i)`` up to the bound, summed per key as
    ``(k, sum)``, and a join of the shifted records with the input by key."""
    loop = xs.iterate(lambda v: xs.concat(v.filter(lambda r: r[1] < BOUND).map(lambda r: (r[0], r[1] + 1))))
    return [loop.sum(), loop.join(xs), loop.count()]


def nested(xs):
    """Depth 2: an outer shift around an inner shift of the other coordinate, then a count."""
    def outer(w):
        base = xs.concat(w.filter(lambda r: r[1] < BOUND).map(lambda r: (r[0], r[1] + 1)))
        return base.iterate(lambda v: base.concat(v.filter(lambda r: r[0] < BOUND).map(lambda r: (r[0] + 1, r[1]))))

    return [xs.iterate(outer).count(), xs.iterate(outer).map(lambda r: (r[0] % 3, r[1])).sum()]


def triple(xs, edges):
    """Depth 3: reachability from ``xs`` nodes along non-negative ``edges`` (distinct inside), inside
    two shifting loops of the roots."""
    def reach(roots):
        start = roots.map(lambda n: (n, n))
        return start.iterate(lambda r: r.join_map(edges, lambda _n, root, dst: (dst, root)).concat(start).distinct())

    def middle(m):
        return reach(m.map(lambda n: n % BOUND)).map(lambda p: p[1]).concat(m).distinct()

    def outer(o):
        return o.iterate(middle).concat(o).distinct()

    return [xs.iterate(outer).count(), reach(xs).count()]


def rising(xs):
    """Depth 2 around an inner loop that each outer round feeds anew: values rise to the bound
    through the outer loop (a ``max``) while an inner loop spreads them over the keys (a ``min``).
    The outer loop's feedback reaches the inner loop's ingress after the inner loop's pass of the
    same round; the next round must still see that work (the plan executor once ended the outer
    loop's rounds there, and its closing pass then took those times as complete)."""
    d = xs.distinct()

    def outer(y):
        inner = y.iterate(lambda z: z.map(lambda r: ((r[0] + 1) % 4, r[1])).concat(y).min())
        return inner.map(lambda r: (r[0], min(r[1] + 1, BOUND))).concat(d).max()

    return [d.iterate(outer), d.iterate(outer).count()]


def stream(rng: random.Random, *, negative: bool, size: int, keys: int):
    """``(record, time, diff)`` updates at distinct times (some retracted later), with epoch cuts."""
    updates, present = [], []
    for t in range(size):
        if present and rng.random() < 0.3:
            record, diff = present.pop(rng.randrange(len(present)))
            updates.append((record, t, -diff))
        else:
            record = rng.randrange(keys) if keys else (rng.randrange(4), rng.randrange(BOUND))
            diff = rng.choice((-2, -1, 1, 2, 3)) if negative else 1
            updates.append((record, t, diff))
            present.append((record, diff))
    return updates


def run(build, inputs, cuts, *, executor: str, workers: int, config: EngineConfig = EngineConfig()):
    config = dataclasses.replace(config, executor=executor)
    names = list(inputs)

    def make(df):
        return build(*(df.new_input(name).collection for name in names))

    if workers == 1:
        df = Dataflow(config=config)
        outputs = [o.capture() for o in make(df)]
        sessions = [df.inputs[name] for name in names]
    else:
        df = Workers(workers, lambda d: [o.capture() for o in make(d)], config=config)
        outputs = [df.capture(lambda out, i=i: out[i]) for i in range(len(df.outputs[0]))]
        sessions = [df.input(name) for name in names]
    lo = 0
    for cut in [*cuts, None]:
        for session, name in zip(sessions, names):
            for record, t, diff in inputs[name]:
                if t >= lo and (cut is None or t < cut):
                    session.update(record, t, diff)
            session.close() if cut is None else session.advance_to(cut)
        df.run()
        lo = cut
    return outputs, df


CASES = [("depth1", shifted, dict(negative=True, size=40, keys=0)),
         ("depth2", nested, dict(negative=True, size=25, keys=0)),
         ("depth3", triple, dict(negative=False, size=20, keys=8)),
         ("nested_feedback", rising, dict(negative=True, size=20, keys=0))]


# every loop round lets its traces merge its batches during the epoch (by default only large ones do)
MERGING_ROUNDS = {"rounds merged after the epoch": EngineConfig(),
                  "rounds merged during it": EngineConfig(round_merge_updates=1)}


@pytest.mark.parametrize("merging", list(MERGING_ROUNDS))
@pytest.mark.parametrize("name,build,shape", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", range(4))
def test_the_plan_executor_agrees_with_the_reference(name, build, shape, seed, merging):
    rng = random.Random(seed * 31 + len(name))
    inputs = {"xs": stream(rng, **shape)}
    if build is triple:
        inputs["edges"] = [((rng.randrange(8), rng.randrange(8)), t, 1) for t in range(12)]
        inputs["edges"] += [(e, t + 20, -1) for e, t, _ in inputs["edges"][:4]]
    times = sorted({t for updates in inputs.values() for _, t, _ in updates})
    cuts = sorted(rng.sample(times[1:], k=min(4, len(times) - 1)))
    workers = 1 + seed % 3
    want, _ = run(build, inputs, cuts, executor="nodes", workers=workers)
    got, df = run(build, inputs, cuts, executor="plan", workers=workers, config=MERGING_ROUNDS[merging])
    probe_times = sorted({t for t in times} | {t - 1 for t in cuts})
    for w, g in zip(want, got):
        assert g.frontier == w.frontier == []
        expected = accumulate_at(w.updates, probe_times)
        assert accumulate_at(g.updates, probe_times) == expected
    first = df if workers == 1 else df.dataflows[0]
    assert first._executor is not None and first._executor.rounds > 0  # the plan executor ran the loops


def test_the_plan_is_derived_from_the_graph():
    df = Dataflow(config=EngineConfig(executor="plan"))
    xs, edges = df.new_input("xs"), df.new_input("edges")
    for out in triple(xs.collection, edges.collection):
        out.capture()
    df.run()
    plan = df._executor.plan
    check(plan)
    assert plan is not None and lower(df.root).kind.tolist() == plan.kind.tolist()
    kinds = plan.kind.tolist()
    loops = [i for i, k in enumerate(kinds) if k == KIND["loop"]]
    assert len(loops) == 4 and sorted(plan.scope_depth.tolist()) == [1, 2, 2, 3, 4]
    joins = [i for i, k in enumerate(kinds) if k == KIND["join"]]
    assert joins and all(plan.reads_start[i + 1] - plan.reads_start[i] == 2 for i in joins)
    assert not plan.boundary[joins].any()  # the reachability join builds its records from id columns
    filters_and_maps = [i for i, k in enumerate(kinds) if k == KIND["map"] and plan.transform[i] == 0]
    assert filters_and_maps and plan.boundary[filters_and_maps].all()  # n % BOUND is user code


def test_a_plan_executor_must_be_named_exactly():
    from ddflow.operators.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="EngineConfig.executor must be one of 'nodes', 'plan'"):
        EngineConfig(executor="compiled")


def concats(xs):
    """Concats in chains, of one collection with itself, and as a loop's variable (``iterate``)."""
    twice = xs.concat(xs)
    chained = twice.concat(xs.negate()).concat(twice)  # xs three times
    loop = xs.iterate(lambda v: xs.concat(v.filter(lambda r: r[1] < BOUND).map(lambda r: (r[0], r[1] + 1))).distinct())
    return [chained, chained.count(), loop.concat(loop).count()]


@pytest.mark.parametrize("seed", range(3))
def test_concats_are_routed_around_not_stepped(seed):
    """The plan executor never steps a concat (its producers push to the concat's consumers, a port as
    many times as it is reached), and computes what the reference computes."""
    rng = random.Random(seed)
    inputs = {"xs": stream(rng, negative=False, size=30, keys=0)}
    times = sorted({t for _, t, _ in inputs["xs"]})
    cuts = sorted(rng.sample(times[1:], k=3))
    want, _ = run(concats, inputs, cuts, executor="nodes", workers=1)
    got, df = run(concats, inputs, cuts, executor="plan", workers=1)
    for w, g in zip(want, got):
        assert g.frontier == w.frontier == []
        assert accumulate_at(g.updates, times) == accumulate_at(w.updates, times)
    plan = df._executor.plan
    routed = [plan.nodes[i] for i, k in enumerate(plan.kind.tolist()) if k == KIND["concat"]]
    assert len(routed) >= 5 and all(node.seen is None for node in routed)
