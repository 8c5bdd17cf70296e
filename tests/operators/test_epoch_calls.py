"""Python calls per single-change epoch of the plan executor stay below a bound.

The engine's control plane is measured in Python calls (what ``benchmarks/bench_epoch_calls.py``
prints for the 1k/2k reachability): here the same sliding-window reachability, smaller (200 nodes,
400 edges, 4 roots), runs single-change epochs after a warm-up, and cProfile counts every call
(functions, methods, builtins) of the epochs, each function by its own entry. The bound is what the executor reached when this test
was written, with some room; a change that adds Python steps to every round fails it. The output is
checked against a from-scratch BFS, so the count is of epochs that computed the right thing.
"""

from __future__ import annotations

import cProfile

import numpy as np
import pytest

from ddflow.operators import Dataflow
from ddflow.operators.library import reachability
from ddflow.operators.testing import window_edges
from ddflow.operators.tuning import EngineConfig

NODES, EDGES, ROOTS = 200, 400, 4
WARM, EPOCHS = 60, 30
BOUND = {"plan": 1_480}  # Python calls per single-change epoch (1,400 when this bound was set)


def reached(edges: np.ndarray) -> set[tuple[int, int]]:
    """``(root, node)`` pairs reachable along ``edges`` (a plain BFS per root)."""
    out: dict[int, list[int]] = {}
    for s, d in edges.tolist():
        out.setdefault(s, []).append(d)
    pairs = set()
    for root in range(ROOTS):
        seen, todo = {root}, [root]
        while todo:
            for d in out.get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        pairs.update((root, n) for n in seen)
    return pairs


@pytest.mark.compiles  # (a kernel run as Python makes Python calls of its own)
@pytest.mark.parametrize("executor", sorted(BOUND))
def test_calls_per_single_change_epoch_stay_below_the_bound(executor):
    e = window_edges(NODES, EDGES, WARM + EPOCHS)
    df = Dataflow(config=EngineConfig(executor=executor))
    roots, edges = df.new_input("roots"), df.new_input("edges")
    out = reachability(roots.collection, edges.collection).capture(history=False)
    roots.update_many(np.arange(ROOTS), np.zeros(ROOTS, np.int64), np.ones(ROOTS, np.int64))
    edges.update_many(e[:EDGES], np.zeros(EDGES, np.int64), np.ones(EDGES, np.int64))
    roots.close()
    edges.advance_to(1)
    df.run()
    window = [tuple(r) for r in e[:EDGES].tolist()]

    def slide(k: int) -> None:
        edges.update(window[k], 1 + k, -1)
        edges.update(tuple(e[EDGES + k].tolist()), 1 + k, 1)
        window.append(tuple(e[EDGES + k].tolist()))
        edges.advance_to(2 + k)
        df.run()

    for k in range(WARM):
        slide(k)
    profile = cProfile.Profile()
    profile.enable()
    for k in range(WARM, WARM + EPOCHS):
        slide(k)
    profile.disable()
    # every function's calls, summed from the profiler's own entries (pstats keys functions by file, line
    # and name, so that the generated __init__ of every dataclass, all '<string>:2', would count as one)
    calls = sum(entry.callcount for entry in profile.getstats()) / EPOCHS
    final: dict[tuple[int, int], int] = {}
    for record, _time, diff in out.drain():
        final[record] = final.get(record, 0) + diff
    assert {r for r, m in final.items() if m} == reached(e[WARM + EPOCHS : WARM + EPOCHS + EDGES])
    assert set(final.values()) - {0} == {1}
    print(f"{executor}: {calls:,.0f} Python calls per single-change epoch")
    assert calls < BOUND[executor], f"{calls:,.0f} Python calls per single-change epoch (bound {BOUND[executor]:,})"
