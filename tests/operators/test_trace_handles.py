"""Readers of traces (joins, reductions) hold their handles while their inputs may change and drop them
explicitly once the inputs are closed: releasing a trace never waits for garbage collection."""

from __future__ import annotations

from ddflow.operators import Dataflow


def holds(df: Dataflow) -> dict[str, int]:
    """Per trace, how many reader holds it has (logical)."""
    out = {}
    for node in df._all_nodes():
        for name, spine in node.arrangements():
            out[name] = spine._logical_holds.holders()
    return out


def test_joins_and_reductions_drop_their_handles_when_their_inputs_close():
    df = Dataflow()
    left, right = df.new_input("left"), df.new_input("right")
    joined = left.collection.join(right.collection).capture()
    counted = left.collection.count().capture()
    lowest = right.collection.min().capture()
    left.insert((1, 10), 0)
    right.insert((1, 20), 0)
    for s in (left, right):
        s.advance_to(1)
    df.run()
    before = holds(df)
    assert before and all(n >= 1 for n in before.values()), before
    left.insert((1, 11), 1)
    left.close()
    df.run()
    assert all(n >= 1 for n in holds(df).values()), "right is still open: every reader may still read"
    right.close()
    df.run()
    assert holds(df) == dict.fromkeys(before, 0), "closed inputs: every reader has dropped its handles"
    assert joined.at(5) == {(1, (10, 20)): 1, (1, (11, 20)): 1}
    assert counted.at(5) == {((1, 10), 1): 1, ((1, 11), 1): 1}
    assert lowest.at(5) == {(1, 20): 1}
    df.run()  # running again after the drop reads nothing and raises nothing
    assert joined.at(5) == {(1, (10, 20)): 1, (1, (11, 20)): 1}


def test_set_compaction_moves_both_holds_and_refuses_going_back():
    import pytest

    from ddflow.operators.errors import CompactionError
    from ddflow.operators.frontier import Antichain
    from ddflow.operators.traces.spine import Spine

    spine = Spine(2)
    a, b = spine.handle(), spine.handle()
    a.set_compaction(Antichain([(3, 1)]))
    b.set_compaction(Antichain([(2, 5), (4, 0)]))
    assert spine.logical_frontier() == Antichain([(2, 5), (3, 1), (4, 0)])
    assert spine.physical_frontier() == Antichain([(2, 5), (3, 1), (4, 0)])
    a.set_compaction(Antichain([(3, 1)]))  # the same frontier again: nothing changes
    a.set_compaction(Antichain([(5, 2)]))
    assert spine.logical_frontier() == spine.physical_frontier() == Antichain([(2, 5), (4, 0)])
    with pytest.raises(CompactionError, match="backwards"):
        a.set_compaction(Antichain([(4, 2)]))
    b.drop()
    a.drop()
    assert spine._logical_holds.is_empty() and spine._physical_holds.is_empty()
