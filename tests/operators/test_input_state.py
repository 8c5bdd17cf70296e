"""An input's state read from the engine (`InputSession.state`): at every frontier the dataflow ran
to, the collection accumulated before it and the updates given at later times, as a plain
accumulation of the same updates says; the arrangement keeps each record once (compacted)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.errors import DiffError


def accumulate(updates, frontier):
    base, pending = Counter(), Counter()
    for record, t, diff in updates:
        if t < frontier:
            base[record] += diff
        else:
            pending[(record, t)] += diff
    return {r: c for r, c in base.items() if c}, {k: d for k, d in pending.items() if d}


@pytest.mark.parametrize("seed", range(4))
def test_the_state_at_each_frontier_is_the_accumulated_input(seed):
    rng = random.Random(seed)
    df = Dataflow()
    session = df.new_input("a")
    state = session.state()
    out = session.collection.map(lambda r: r[0]).count().capture()
    given = []
    frontier = 0
    for _ in range(12):
        ups = [((rng.randrange(6), rng.choice(["x", "y"])), frontier + rng.randrange(30), rng.choice([1, 1, -1, 2]))
               for _ in range(rng.randrange(0, 25))]
        if ups:
            session.update_many([u[0] for u in ups], [u[1] for u in ups], [u[2] for u in ups])
        given += ups
        frontier += rng.randrange(1, 15)
        session.advance_to(frontier)
        df.run()
        records, counts, pending = state.read()
        base, later = accumulate(given, frontier)
        assert state.frontier == frontier
        assert dict(zip(records, counts.tolist())) == base and len(records) == len(base)
        assert {(r, t): d for r, t, d in pending} == later and len(pending) == len(later)
    per_key = Counter()
    for record, count in base.items():
        per_key[record[0]] += count
    assert out.at(frontier - 1) == {(k, c): 1 for k, c in per_key.items() if c}  # the dataflow is unaffected


def test_a_count_outside_int64_is_named():
    df = Dataflow()
    session = df.new_input("a")
    state = session.state()
    big = (1 << 63) - 1
    session.update_many([("x", 1)] * 1, [1], [big])
    session.advance_to(2)
    df.run()
    session.update_many([("y", 0)] * 30, list(range(2, 32)), [1] * 30)  # a larger batch: no merge at once
    session.update_many([("x", 1)], [40], [big])
    session.advance_to(50)
    try:
        df.run()
    except DiffError as exc:  # the arrangement merged the two counts: refused there
        assert "a.state" in str(exc)
        return
    with pytest.raises(DiffError, match=r"input 'a': the count of \('x', 1\) before time 50 is outside int64"):
        state.read()
