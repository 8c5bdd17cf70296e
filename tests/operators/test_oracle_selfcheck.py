"""The oracle and the replay helpers checked against hand-computed answers (no engine involved)."""

from __future__ import annotations

import pytest
from oracle import Bag, OracleError, evaluate
from test_oracle_iterate import (
    connected_components,
    nested_reachability,
    nested_reachability_entered,
    reachability,
    reachability_entered,
    strongly_connected,
    two_core,
)

from ddflow.operators.testing import (
    ReplayError,
    ReplaySource,
    accumulate,
    is_complete,
    lockstep,
    random_source,
    run_until,
    sliding_window_graph,
)

# -- oracle -----------------------------------------------------------------------------------


def test_accumulation_drops_zeros_and_keeps_negatives():
    updates = [("a", 1, 2), ("a", 3, -2), ("b", 2, -1), ("c", 5, 1)]
    assert accumulate(updates, 0) == {}
    assert accumulate(updates, 2) == {"a": 2, "b": -1}
    assert accumulate(updates, 4) == {"b": -1}


def test_linear_operators():
    bag = Bag({1: 2, 2: -1, 3: 1})
    assert bag.map(lambda r: r % 2).counts == {1: 3, 0: -1}
    assert bag.filter(lambda r: r > 1).counts == {2: -1, 3: 1}
    assert bag.flat_map(lambda r: range(r)).counts == {0: 2 - 1 + 1, 2: 1}
    assert bag.concat(bag.negate()).counts == {}
    assert bag.concat(bag, Bag({4: 1})).counts == {1: 4, 2: -2, 3: 2, 4: 1}


def test_join_family_multiplies_counts():
    a = Bag({(1, "x"): 2, (2, "y"): -1, (3, "z"): 1})
    b = Bag({(1, "p"): 3, (2, "q"): 1, (2, "r"): 1})
    assert a.join(b).counts == {(1, ("x", "p")): 6, (2, ("y", "q")): -1, (2, ("y", "r")): -1}
    assert a.join_map(b, lambda k, x, y: x + y).counts == {"xp": 6, "yq": -1, "yr": -1}
    keys = Bag({1: -1, 3: 2})
    assert a.semijoin(keys).counts == {(1, "x"): -2, (3, "z"): 2}
    assert a.antijoin(keys).counts == {(1, "x"): 4, (2, "y"): -1, (3, "z"): -1}
    assert a.semijoin(keys.arrange_by_self()).counts == a.semijoin(keys).counts
    with pytest.raises(OracleError, match="not a \\(key, val\\) pair"):
        Bag({5: 1}).join(b)


def test_reductions_follow_the_semantics():
    group = Bag({("k", 1): -1, ("k", 2): 3, ("k", 5): 1, ("k", 7): -2, ("j", 4): -1})
    assert group.min().counts == {("k", 2): 1}
    assert group.max().counts == {("k", 5): 1}
    assert group.sum().counts == {("k", -1 + 6 + 5 - 14): 1, ("j", -4): 1}
    assert group.top_k(1).counts == {("k", 5): 1}
    assert group.top_k(3).counts == {("k", 5): 1, ("k", 2): 2}
    assert group.top_k(9).counts == {("k", 5): 1, ("k", 2): 3}
    seen = []
    group.reduce(lambda k, vals: seen.append((k, vals)) or [])
    assert sorted(seen) == [("j", [(4, -1)]), ("k", [(1, -1), (2, 3), (5, 1), (7, -2)])]
    assert Bag({("s", 0): 5}).sum().counts == {("s", 0): 1}


def test_whole_record_reductions():
    bag = Bag({"a": 2, "b": -1, "c": 1})
    assert bag.count().counts == {("a", 2): 1, ("b", -1): 1, ("c", 1): 1}
    assert bag.distinct().counts == {"a": 1, "c": 1}
    assert bag.threshold(lambda r, c: c * 10 if r != "c" else 0).counts == {"a": 20, "b": -10}


def test_iterate_reaches_the_fixed_point():
    # Collatz-ish shrink: everything flows down to 0.
    assert Bag({8: 1}).iterate(lambda v: v.map(lambda x: x // 2).concat(Bag({8: 1})).distinct()).counts == {
        8: 1,
        4: 1,
        2: 1,
        1: 1,
        0: 1,
    }
    with pytest.raises(OracleError, match="no fixed point"):
        Bag({1: 1}).iterate(lambda v: v.map(lambda x: 1 - x))


GRAPH = {(0, 1): 1, (1, 2): 2, (2, 0): 1, (2, 3): 1, (3, 4): -1, (4, 5): 1, (5, 4): 1}


def test_reachability_and_components_on_a_small_graph():
    roots = Bag({0: 1, 5: -1})
    expected = {0: 1, 1: 1, 2: 1, 3: 1}
    assert reachability(roots, Bag(GRAPH)).counts == expected
    assert reachability_entered(roots, Bag(GRAPH)).counts == expected
    assert nested_reachability(roots, Bag(GRAPH)).counts == expected
    assert nested_reachability_entered(roots, Bag(GRAPH)).counts == expected
    labels = connected_components(Bag(GRAPH)).counts
    assert labels == {(n, 0): 1 for n in range(4)} | {(4, 4): 1, (5, 4): 1}


def test_strongly_connected_components_on_a_small_graph():
    # SCCs {0,1,2} and {4,5}; (2,3) leaves a component, (3,4) has a negative count (absent).
    assert strongly_connected(Bag(GRAPH)).counts == {
        (0, 1): 1,
        (1, 2): 1,
        (2, 0): 1,
        (4, 5): 1,
        (5, 4): 1,
    }


def test_two_core_on_a_small_graph():
    # Round 1 drops (3,0) (source out-degree 1) and (1,4) (destination in-degree 1); then (1,2)
    # and (2,0), then (0,2) and (2,1), then (0,1): the pruning cascades to nothing.
    graph = Bag({(0, 1): 1, (1, 2): 1, (2, 0): 1, (0, 2): 1, (2, 1): 1, (3, 0): 1, (1, 4): 1})
    assert two_core(graph).counts == {}
    both_ways = Bag({(a, b): 1 for a in range(3) for b in range(3) if a != b})
    assert two_core(both_ways.concat(Bag({(3, 0): 1}))).counts == both_ways.counts


def test_evaluate_returns_each_output():
    out = evaluate(lambda a, b: (a.concat(b), a.arrange_by_self()), [{1: 1}, {1: 2}])
    assert out == [{1: 3}, {1: 1}]


# -- replay helpers ---------------------------------------------------------------------------


class Recorder:
    """An input session that records the calls made to it."""

    def __init__(self):
        self.calls = []

    def update(self, record, time, diff):
        self.calls.append(("update", record, time, diff))

    def advance_to(self, time):
        self.calls.append(("advance_to", time))

    def close(self):
        self.calls.append(("close",))


def test_replay_source_splits_epochs_and_feeds_in_recorded_order():
    source = ReplaySource([("a", 15, 1), ("b", 3, 2), ("c", 12, -1), ("d", 30, 1)], [10, 20])
    assert [len(epoch.updates) for epoch in source.epochs] == [1, 2, 1]
    session = Recorder()
    list(source.replay(session))
    assert session.calls == [
        ("update", "b", 3, 2),
        ("advance_to", 10),
        ("update", "a", 15, 1),
        ("update", "c", 12, -1),
        ("advance_to", 20),
        ("update", "d", 30, 1),
        ("close",),
    ]
    assert source.times() == [3, 12, 15, 30]
    assert source.accumulate(14) == {"b": 2, "c": -1}
    assert source.frontier_after(0) == 10 and source.frontier_after(1) == 20
    assert not source.closed_after(1) and source.closed_after(2)


def test_replay_source_hold_and_open():
    source = ReplaySource([("a", 1, 1), ("b", 11, 1)], [10, 20], hold=[True, False], close=False)
    session = Recorder()
    source.feed(session, 0)
    assert session.calls == [("update", "a", 1, 1)]
    assert source.frontier_after(0) is None and source.frontier_after(1) == 20
    source.feed(session, 1)
    source.feed(session, 2)
    assert session.calls[-1] == ("advance_to", 20)
    assert not source.closed_after(2)


@pytest.mark.parametrize(
    ("updates", "boundaries", "message"),
    [
        ([("a", 1)], [], "must be \\(data, time, diff\\)"),
        ([("a", 1.5, 1)], [], "time must be an int"),
        ([("a", 1, 0)], [], "non-zero int"),
        ([("a", 1, 1.0)], [], "non-zero int"),
        ([], [5, 5], "must increase"),
        ([], ["5"], "boundary must be an int"),
    ],
)
def test_replay_source_rejects_bad_schedules(updates, boundaries, message):
    with pytest.raises(ReplayError, match=message):
        ReplaySource(updates, boundaries)


class FakeProbe:
    def __init__(self, frontiers):
        self.frontiers = list(frontiers)
        self.frontier = self.frontiers.pop(0)

    def at(self, time):
        return {"at": time}


class FakeDataflow:
    def __init__(self, probe):
        self.probe = probe
        self.runs = 0

    def run(self):
        self.runs += 1


def test_run_until_feeds_steps_until_complete():
    probe = FakeProbe([[5], [10], [20]])
    df = FakeDataflow(probe)

    def steps():
        while probe.frontiers:
            probe.frontier = probe.frontiers.pop(0)
            yield

    assert run_until(df, probe, 12, steps()) == {"at": 12}
    assert df.runs == 3
    assert is_complete([], 10**18) and is_complete([13], 12) and not is_complete([12], 12)


def test_run_until_reports_an_unreachable_time():
    probe = FakeProbe([[5]])
    with pytest.raises(ReplayError, match="time 7 still incomplete at frontier \\[5\\]"):
        run_until(FakeDataflow(probe), probe, 7)
    with pytest.raises(ReplayError, match="inputs exhausted"):
        run_until(FakeDataflow(probe), probe, 7, iter(()))


def test_lockstep_feeds_sources_of_different_lengths():
    a, b = Recorder(), Recorder()
    short = ReplaySource([("x", 1, 1)], [])
    long = ReplaySource([("y", 1, 1), ("z", 6, 1)], [5])
    assert list(lockstep([(a, short), (b, long)])) == [0, 1]
    assert a.calls == [("update", "x", 1, 1), ("close",)]
    assert b.calls == [("update", "y", 1, 1), ("advance_to", 5), ("update", "z", 6, 1), ("close",)]


def test_random_source_is_seeded():
    one = random_source(7, ["a", "b"], epochs=3, per_epoch=4, width=10, base=100)
    two = random_source(7, ["a", "b"], epochs=3, per_epoch=4, width=10, base=100)
    assert one.updates == two.updates and one.boundaries == (110, 120, 130)
    assert all(100 <= t < 130 for _, t, _ in one.updates)


def test_sliding_window_graph_removes_the_oldest_edge_per_change():
    source = sliding_window_graph(10, 20, 25, seed=1, epoch_changes=10)
    assert source.boundaries == (1, 11, 21, 26)
    graph = [e for e, t, d in source.updates if t == 0]
    assert len(graph) == 20
    window = source.accumulate(25)
    assert sum(window.values()) == 20 and all(c > 0 for c in window.values())
    changes = [(e, t, d) for e, t, d in source.updates if t == 1]
    assert sorted(d for _, _, d in changes) == [-1, 1] and (graph[0], 1, -1) in changes
