"""A loop's iteration limit: a loop with no fixed point raises instead of running for ever, one that
converges within the limit is unaffected, and several workers stop at the same iteration."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.errors import ConfigurationError, DataflowError, IterationLimitError
from ddflow.operators.workers import Workers


def reach_build(df: Dataflow, limit: int | None):
    roots, edges = df.new_input("roots"), df.new_input("edges")
    reach = roots.collection.iterate(
        lambda r: edges.collection.enter(r.scope).semijoin(r).map(lambda e: e[1]).concat(roots.collection).distinct(),
        max_iterations=limit)
    return reach.capture()


def feed_oscillating(roots, edges) -> None:
    """Node 1 is reached by (0, 1) and un-reached by the removal of a self loop (1, 1) never inserted:
    v_1 = {0, 1}, v_2 = {0}, v_3 = {0, 1}, ...: the iterates oscillate and no fixed point exists."""
    roots.insert(0, 0)
    edges.insert((0, 1), 5)
    edges.remove((1, 1), 7)
    roots.advance_to(10)
    edges.advance_to(10)


def test_a_loop_without_fixed_point_raises_at_its_limit() -> None:
    df = Dataflow()
    reach_build(df, 50)
    feed_oscillating(df.inputs["roots"], df.inputs["edges"])
    with pytest.raises(IterationLimitError, match="max_iterations=50") as caught:
        df.run()
    assert caught.value.limit == 50 and caught.value.iteration == 50
    assert isinstance(caught.value, DataflowError)


def test_a_chain_converges_within_a_limit_it_fits_and_raises_below_it() -> None:
    """A path 0 -> 1 -> ... -> 9 from root 0: node i joins at iteration i (v_9 differs from v_8, v_10
    equals v_9), so the loop's last work is at iteration 9: a limit of 10 fits, 9 does not."""
    for limit, fits in ((10, True), (9, False)):
        df = Dataflow()
        probe = reach_build(df, limit)
        roots, edges = df.inputs["roots"], df.inputs["edges"]
        roots.insert(0, 0)
        for i in range(9):
            edges.insert((i, i + 1), 1 + i)
        roots.advance_to(100)
        edges.advance_to(100)
        if fits:
            df.run()
            assert probe.at(99) == {i: 1 for i in range(10)}
        else:
            with pytest.raises(IterationLimitError):
                df.run()


@pytest.mark.parametrize("count", [2, 3])
def test_every_worker_stops_at_the_same_iteration(count: int) -> None:
    workers = Workers(count, lambda df: reach_build(df, 30))
    feed_oscillating(workers.input("roots"), workers.input("edges"))
    with pytest.raises(IterationLimitError, match="max_iterations=30"):
        workers.run()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_the_limit_must_be_a_positive_int(bad) -> None:
    df = Dataflow()
    with pytest.raises(ConfigurationError, match="max_iterations"):
        reach_build(df, bad)
