"""Memory stays flat: sliding-window reachability keeps its arrangements' size bounded.

1,000 nodes, a window of 2,000 edges, 10 roots; 100,000 changes, change ``k`` removing the oldest
edge ``k`` and adding edge ``2000 + k`` at its own nanosecond time ``1 + k``; the frontier advances
every 1,000 changes. Compaction by the frontier must keep the total arrangement record count
within 2x of its value after the first 1,000 changes (record counts, never times).
"""

from __future__ import annotations

import pytest
from support.oracles import reachable

from ddflow.operators.testing import sliding_window_graph

NODES, EDGES, ROOTS, CHANGES, EPOCH = 1_000, 2_000, 10, 100_000, 1_000


def total_records(df) -> int:
    return sum(stats["records"] for stats in df.arrangement_stats().values())


@pytest.mark.slow  # 100,000 changes (the full suite runs it)
def test_sliding_window_reachability_memory_is_flat():
    from ddflow.operators import Dataflow

    source = sliding_window_graph(NODES, EDGES, CHANGES, seed=42, epoch_changes=EPOCH)
    df = Dataflow()
    roots_in = df.new_input("roots")
    edges_in = df.new_input("edges")
    roots = roots_in.collection
    edges = edges_in.collection.distinct()
    reach = roots.iterate(
        lambda r: edges.enter(r.scope).semijoin(r).map(lambda e: e[1]).concat(roots).distinct()
    )
    probe = reach.capture()
    for node in range(ROOTS):
        roots_in.insert(node, 0)
    roots_in.close()

    sizes: list[int] = []
    for index in range(len(source)):
        source.feed(edges_in, index)
        df.run()
        sizes.append(total_records(df))
    for name, stats in df.arrangement_stats().items():
        assert {"records", "batches", "bytes", "merge_work"} <= set(stats), (name, stats)
        assert all(isinstance(stats[k], int) and stats[k] >= 0 for k in stats), (name, stats)
    # sizes[0]: the initial 2,000 edges; sizes[1]: after the first 1,000 changes.
    print(f"arrangement records: after load {sizes[0]}, after {EPOCH} changes {sizes[1]}, "
          f"max {max(sizes[1:])}, final {sizes[-1]}")
    assert len(sizes) == 2 + CHANGES // EPOCH
    baseline = sizes[1]
    assert baseline > 0
    worst = max(range(1, len(sizes)), key=lambda i: sizes[i])
    assert sizes[worst] <= 2 * baseline, (
        f"arrangement records grew from {baseline} (after {EPOCH} changes) to {sizes[worst]} "
        f"(after {worst * EPOCH} changes); sizes per epoch: {sizes}"
    )

    # The computation is still right at the end and half way (spot checks against a BFS).
    for time in (CHANGES // 2, CHANGES):
        want = reachable(source.accumulate(time), range(ROOTS))
        assert probe.at(time) == {node: 1 for node in want}, f"reachability wrong at {time}"


@pytest.mark.slow  # 20,000 changes through memoized joins (the full suite runs it)
def test_join_memos_start_afresh_at_their_limit_on_a_sliding_window(monkeypatch):
    """Reachability whose join builds ``(dst, root)`` records by a function that computes (so through
    the memoized builder, not from id columns) meets ever new ``(node, root, dst)`` codes as the
    window slides: with a small limit its memos start afresh many times, never hold much more than
    the limit, and the results stay right. (The library's reachability builds the same records from
    id columns: no memo at all.)"""
    import gc

    from ddflow.operators import Dataflow
    from ddflow.operators.tuning import EngineConfig
    from ddflow.operators.values import memo

    def reachability(roots, edges):
        start = roots.map(lambda root: (root, root))

        def expand(reach):
            return reach.join_map(edges, lambda _node, root, dst: (dst, root + 0)).concat(start).distinct()

        return start.iterate(expand).map(lambda pair: (pair[1], pair[0]))

    limit = 5_000
    changes = 20_000
    source = sliding_window_graph(NODES, EDGES, changes, seed=7, epoch_changes=500)
    gc.collect()
    earlier = {id(m) for m in gc.get_objects() if isinstance(m, memo.Memo)}
    df = Dataflow(config=EngineConfig(memo_limit=limit))
    roots_in, edges_in = df.new_input("roots"), df.new_input("edges")
    probe = reachability(roots_in.collection, edges_in.collection).capture()
    for node in range(ROOTS):
        roots_in.insert(node, 0)
    roots_in.close()
    memos = [m for m in gc.get_objects() if isinstance(m, memo.Memo) and id(m) not in earlier]
    held = []
    for index in range(len(source)):
        source.feed(edges_in, index)
        df.run()
        held.append(max(len(m) for m in memos))
    print(f"largest memo: {max(held)} codes; restarts {[m.restarts for m in memos]}")
    assert max(m.restarts for m in memos) >= 5
    assert max(held) <= 4 * limit, held
    for time in (changes // 3, changes):
        want = reachable(source.accumulate(time), range(ROOTS))
        got = probe.at(time)
        assert got == {(root, node): 1 for root in range(ROOTS) for node in reachable(
            source.accumulate(time), [root])}, f"reachability wrong at {time}"
        assert {node for _root, node in got} == want
