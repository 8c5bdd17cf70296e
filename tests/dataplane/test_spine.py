"""Traces: any sequence of inserts, merges and compactions keeps every reader's view exact.

A hypothesis script interleaves inserts (times in ``[lower, upper)``), extra merge effort, new reader
handles, logical and physical compaction of each handle, and drops. After every step the trace's
accumulation at every time beyond its compaction frontier, and beyond each live reader's own frontier,
equals the brute-force sum of everything inserted; no batch is advanced past a reader's frontier.
Fuel is made tiny for some scripts so that merges stay in progress across many inserts.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from dataplane_oracle import (
    R,
    accumulation_table,
    advance_frontier,
    dataplane,
    depths,
    grid,
    make_updates,
    rows,
    updates,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.tuning import EngineConfig
from ddflow.operators.errors import CompactionError, DiffError
from ddflow.operators.frontier import Antichain
from ddflow.operators.lattice import T_MIN
from ddflow.operators.traces.batch import Updates, concat
from ddflow.operators.traces.merge import Merge
from ddflow.operators.traces.spine import Spine
from ddflow.operators.traces.trie import TrieBatch


def fuel(per_update: int, minimum: int) -> EngineConfig:
    """An engine configuration with the given merge fuel."""
    return EngineConfig(merge_fuel_per_update=per_update, merge_min_fuel=minimum)


def settle(trace: Spine) -> None:
    """Start the merges the frontiers allow and finish them: each empty insert gives merges their fuel."""
    trace.insert(Updates.empty(2, trace.depth), trace.upper)
    while any(isinstance(m, Merge) for m in trace.items):
        trace.insert(Updates.empty(2, trace.depth), trace.upper)


def check(trace: Spine, handles: list, inserted: list[Updates], d: int) -> None:
    everything = concat(inserted, 2, d)
    contents = trace.contents()
    frontiers = [trace.logical_frontier()] + [h.logical for h in handles if h is not None]
    points = [s for s in grid(d) if any(f.less_equal(s) for f in frontiers)]
    got, want = accumulation_table(contents, points), accumulation_table(everything, points)
    for f in frontiers:
        for s in points:
            if f.less_equal(s):
                assert got[s] == want[s], f"accumulation at {s} (beyond {f}) differs"
    meet = trace.logical_frontier()
    for b in trace.batches():
        assert b.desc.since.dominates(meet), f"batch since {b.desc.since} is past the trace's frontier {meet}"
        for h in handles:
            if h is not None:
                assert b.desc.since.dominates(h.logical), f"batch since {b.desc.since} past a reader at {h.logical}"
    batches = list(trace.batches())
    for older, newer in zip(batches, batches[1:]):
        assert older.desc.upper.dominates(newer.desc.lower), "batches out of order"
    stats = trace.stats()
    assert stats["records"] == len(trace) == sum(len(b.flat()) for b in batches)
    assert stats["batches"] == len(batches)


def advanced(data, frontier: Antichain, d: int) -> Antichain:
    """A frontier at or after ``frontier``, usually one small step ahead, rarely empty (closed)."""
    if data.draw(st.integers(0, 30)) == 0:
        return Antichain()
    steps = data.draw(st.lists(st.tuples(*[st.integers(0, 1)] * d), min_size=1, max_size=3))
    elements = frontier.elements or [(0,) * d]
    return advance_frontier(frontier, [tuple(max(c, 0) + x for c, x in zip(elements[i % len(elements)], step)) for i, step in enumerate(steps)])


def insertable(data, lower: Antichain, upper: Antichain, d: int) -> Updates:
    """Keyed updates whose times are in ``[lower, upper)`` on the grid."""
    allowed = [s for s in grid(d) if lower.less_equal(s) and not upper.less_equal(s)]
    n = data.draw(st.integers(0, 12)) if allowed else 0
    rows_ = data.draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.sampled_from(allowed or [(0,) * d]),
                                         st.integers(-2, 2)), min_size=n, max_size=n))
    return make_updates([(k, v) for k, v, _, _ in rows_], [t for *_, t, _ in rows_], [x for *_, x in rows_], 2, d)


@settings(deadline=None, max_examples=100)  # ~0.2 s per script; 1,500 scripts also pass
@given(st.data())
def test_trace_accumulations_match_brute_force_under_any_script(data):
    _script(data)


@settings(deadline=None, max_examples=50)
@given(st.data())
def test_idle_merges_pair_by_pair_keep_every_view(data):
    """The same scripts with every idle merge, however small, going pair by pair
    (``Spine._merge_pairwise``; large ones only, by default)."""
    from ddflow.operators.traces import spine

    pairwise, spine._PAIRWISE_FROM = spine._PAIRWISE_FROM, 0
    try:
        _script(data)
    finally:
        spine._PAIRWISE_FROM = pairwise


def _script(data) -> None:
    """Interleaved inserts, compactions, handles, drops, idle and extra merge effort, each followed by
    :func:`check`."""
    d = data.draw(depths)
    tiny = data.draw(st.booleans())
    trace = Spine(d, config=fuel(1, 1)) if tiny else Spine(d)
    handles = [trace.handle() for _ in range(data.draw(st.integers(0, 2)))]
    inserted: list[Updates] = []
    kinds = ["insert", "insert", "insert", "logical", "logical", "physical", "physical", "exert", "maintain",
             "handle", "drop"]
    for _ in range(data.draw(st.integers(0, 30))):
        kind = data.draw(st.sampled_from(kinds))
        live = [i for i, h in enumerate(handles) if h is not None]
        if kind == "insert":
            lower, upper = trace.upper, advanced(data, trace.upper, d)
            u = insertable(data, lower, upper, d)
            trace.insert(u, upper)
            assert trace.upper == upper
            inserted.append(u)
        elif kind in ("logical", "physical") and live:
            h = handles[data.draw(st.sampled_from(live))]
            if kind == "logical":
                h.set_logical_compaction(advanced(data, h.logical, d))
            else:
                h.set_physical_compaction(advanced(data, h.physical, d))
        elif kind == "exert":
            trace.exert()
        elif kind == "maintain":  # an empty insert gives merges in progress their fuel
            trace.insert(Updates.empty(2, d), trace.upper)
        elif kind == "handle":
            handles.append(trace.handle())
        elif kind == "drop" and live:
            i = data.draw(st.sampled_from(live))
            handles[i].drop()
            handles[i] = None
        check(trace, handles, inserted, d)
    settle(trace)
    check(trace, handles, inserted, d)


def keyed(pairs: list[tuple[int, int, int, int]]) -> Updates:
    """``(key, val, time, diff)`` rows as 1-dimensional keyed updates."""
    k, v, t, diff = (np.asarray(c, dtype=np.int64) for c in zip(*pairs, strict=True))
    return Updates((k, v), t.reshape(-1, 1), diff)


def test_two_readers_compact_to_their_meet_and_dropping_releases_the_hold():
    trace = Spine(1)
    early, late = trace.handle(), trace.handle()
    early.set_logical_compaction(Antichain([10]))
    late.set_logical_compaction(Antichain([20]))
    for h in (early, late):
        h.set_physical_compaction(Antichain([100]))
    assert trace.logical_frontier() == Antichain([10])
    # the same record changes at times 0..29, one batch per time: merges happen along the way
    for t in range(30):
        trace.insert(keyed([(1, 1, t, 1 if t % 2 == 0 else -1)]), Antichain([t + 1]))
    settle(trace)
    times_held = sorted({int(t) for b in trace.batches() for t in b.times[:, 0]})
    assert all(b.desc.since.dominates(Antichain([10])) for b in trace.batches())
    assert min(times_held) < 20, "the early reader still needs times between 10 and 20 told apart"
    early.drop()
    assert trace.logical_frontier() == Antichain([20])
    with pytest.raises(ValueError, match="dropped"):
        early.set_logical_compaction(Antichain([30]))
    trace.insert(keyed([(1, 1, 30, 1)]), Antichain([31]))
    trace.insert(keyed([(1, 1, 31, -1)]), Antichain([32]))
    settle(trace)
    late.set_physical_compaction(Antichain([100]))
    trace.insert(keyed([(2, 2, 32, 1)]), Antichain([33]))
    settle(trace)
    # everything before 20 collapsed onto 20 once the early hold was gone
    times_held = sorted({int(t) for b in trace.batches() for t in b.times[:, 0]})
    assert min(times_held) >= 20, times_held
    content = trace.contents()
    assert rows(content)[0] == ((1, 1), (20,), 0) or all(t >= (20,) for _, t, _ in rows(content))


def test_a_forgotten_handle_still_holds_and_drop_releases():
    """Compaction never waits for garbage collection: only ``drop`` releases a reader's hold."""
    trace = Spine(1)
    keep, lost = trace.handle(), trace.handle()
    keep.set_logical_compaction(Antichain([50]))
    lost.set_logical_compaction(Antichain([5]))
    assert trace.logical_frontier() == Antichain([5])
    dropped = trace.handle()
    dropped.set_logical_compaction(Antichain([7]))
    del lost
    gc.collect()
    assert trace.logical_frontier() == Antichain([5]), "an unreferenced handle keeps its hold until dropped"
    dropped.drop()
    dropped.drop()  # idempotent
    assert dropped.dropped and trace.logical_frontier() == Antichain([5])
    with pytest.raises(CompactionError, match="dropped"):
        dropped.lookup(np.asarray([1]))
    keep.set_physical_compaction(Antichain([100]))
    for t in range(10):
        trace.insert(keyed([(1, 1, t, 1)]), Antichain([t + 1]))
    settle(trace)
    assert trace.stats()["batches"] == 10, "the forgotten handle's physical hold keeps every batch apart"


def test_dropping_every_handle_releases_the_trace():
    trace = Spine(1)
    a, b = trace.handle(), trace.handle()
    a.set_logical_compaction(Antichain([3]))
    b.set_logical_compaction(Antichain([4]))
    for t in range(10):
        trace.insert(keyed([(1, 1, t, 1)]), Antichain([t + 1]))
    assert trace.logical_frontier() == Antichain([3])
    a.drop()
    assert trace.logical_frontier() == Antichain([4])
    b.drop()
    assert trace.logical_frontier() == Antichain([10]), "no reader: the trace may compact to its upper"
    settle(trace)
    assert rows(trace.contents()) == [((1, 1), (10,), 10)]


def test_compaction_frontier_cannot_move_backwards():
    trace = Spine(2)
    h = trace.handle()
    h.set_logical_compaction(Antichain([(3, 3)]))
    with pytest.raises(ValueError, match="logical compaction frontier moved backwards"):
        h.set_logical_compaction(Antichain([(2, 5)]))
    h.set_physical_compaction(Antichain([(1, 1)]))
    with pytest.raises(ValueError, match="physical compaction frontier moved backwards"):
        h.set_physical_compaction(Antichain([(0, 9)]))


def test_physical_hold_keeps_batches_apart():
    trace = Spine(1)
    h = trace.handle()
    h.set_logical_compaction(Antichain([1_000]))
    for t in range(8):
        trace.insert(keyed([(t, 0, t, 1)]), Antichain([t + 1]))
    assert trace.stats()["batches"] == 8, "the physical frontier is still at the start: no batch may merge"
    h.set_physical_compaction(Antichain([8]))
    settle(trace)
    assert trace.stats()["batches"] < 8


def epochs(parts: list[Updates], d: int) -> list[tuple[Updates, Antichain]]:
    """Part ``i`` moved to epoch ``i`` (first coordinate shifted by ``i * (R + 1)``), with its upper."""
    out = []
    for i, u in enumerate(parts):
        shift = np.zeros(d, dtype=np.int64)
        shift[0] = i * (R + 1)
        upper = Antichain([((i + 1) * (R + 1),) + (T_MIN,) * (d - 1)])
        out.append((Updates(u.data, u.times + shift, u.diffs), upper))
    return out


@dataplane
@given(st.data())
def test_trace_lookup_of_many_keys_equals_a_filter(data):
    d = data.draw(depths)
    trace = Spine(d)
    for u, upper in epochs(data.draw(st.lists(updates(d, width=2, max_size=15, data_range=6), max_size=6)), d):
        trace.insert(u, upper)
    query = data.draw(st.lists(st.integers(-1, 8), max_size=10))
    got = trace.lookup(np.asarray(query, dtype=np.int64))
    wanted = set(query)
    assert sorted(rows(got)) == sorted(r for b in trace.batches() for r in rows(b.flat()) if r[0][0] in wanted)


def test_trace_lookup_across_many_batches_equals_a_filter():
    rng = np.random.default_rng(11)
    trace = Spine(1)
    everything = []
    for step in range(200):
        n = int(rng.integers(1, 300))
        u = Updates((rng.integers(0, 2_000, n), rng.integers(0, 5, n)), np.full((n, 1), step), rng.choice([-1, 1], n))
        trace.insert(u, Antichain([step + 1]))
        everything.append(u)
    query = rng.integers(-5, 2_100, 500)  # unsorted, with duplicates
    got = sorted(rows(trace.lookup(query)))
    want = sorted(r for b in trace.batches() for r in rows(b.flat()) if r[0][0] in set(query.tolist()))
    assert got == want
    # lookups consolidate to the same collection as the inserts, at the final time
    acc_got, acc_want = {}, {}
    for (k, v), _, diff in got:
        acc_got[(k, v)] = acc_got.get((k, v), 0) + diff
    for (k, v), _, diff in rows(concat(everything, 2, 1)):
        if k in set(query.tolist()):
            acc_want[(k, v)] = acc_want.get((k, v), 0) + diff
    assert {k: c for k, c in acc_got.items() if c} == {k: c for k, c in acc_want.items() if c}


@dataplane
@given(st.data())
def test_cursor_walks_keys_vals_and_histories_in_order(data):
    d = data.draw(depths)
    trace = Spine(d)
    reader = trace.handle()  # a reader at the start: times stay apart (kept alive below)
    shifted = epochs(data.draw(st.lists(updates(d, width=2, max_size=15, data_range=4), max_size=5)), d)
    for u, upper in shifted:
        trace.insert(u, upper)
    parts = [u for u, _ in shifted]
    walked = list(trace.cursor())
    expected: dict = {}
    for (k, v), t, diff in rows(concat(parts, 2, d)):
        expected[(k, v, t)] = expected.get((k, v, t), 0) + diff
    flat = [(k, v, t, diff) for k, v, hist in walked for t, diff in hist]
    assert flat == sorted((k, v, t, c) for (k, v, t), c in expected.items() if c)
    pairs = [(k, v) for k, v, _ in walked]
    assert pairs == sorted(set(pairs)) and len(pairs) == len(set(pairs))
    assert all(hist for _, _, hist in walked)
    assert trace.cursor().keys().tolist() == sorted({k for k, _ in pairs})
    reader.drop()


def test_stats_figures():
    trace = Spine(2)
    h = trace.handle()  # physical hold at the start: nothing merges
    a = keyed([(1, 1, 0, 1), (1, 2, 0, 1), (2, 1, 0, 1)])
    a = Updates(a.data, np.column_stack([a.times[:, 0], np.zeros(3, dtype=np.int64)]), a.diffs)
    trace.insert(a, Antichain([(1, 0)]))
    b = Updates((np.asarray([1, 3]), np.asarray([1, 1])), np.asarray([[1, 0], [1, 0]]), np.asarray([-1, 1]))
    trace.insert(b, Antichain([(2, 0)]))
    s = trace.stats()
    assert s["records"] == 5 and s["batches"] == 2 and s["merge_work"] == 0
    # per batch: keys, key_offs (one more), (val, first update) rows closed by one more, (time, diff)
    # rows; 8 bytes each
    want_bytes = 8 * ((2 + 3 + 2 * 4 + 3 * 3) + (2 + 3 + 2 * 3 + 2 * 3))
    assert s["bytes"] == want_bytes
    h.set_logical_compaction(Antichain([(2, 0)]))
    h.set_physical_compaction(Antichain([(2, 0)]))
    settle(trace)
    s = trace.stats()
    # merged and advanced to (2, 0): (1,1) cancels, (1,2), (2,1), (3,1) remain
    assert s == {"records": 3, "batches": 1, "bytes": 8 * (3 + 4 + 2 * 4 + 3 * 3), "merge_work": 5}
    assert rows(trace.contents()) == [((1, 2), (2, 0), 1), ((2, 1), (2, 0), 1), ((3, 1), (2, 0), 1)]


def test_merges_in_progress_count_both_halves():
    trace = Spine(1, config=fuel(1, 1))
    for t in range(2):
        n = 100
        trace.insert(Updates((np.arange(n), np.zeros(n, dtype=np.int64)), np.full((n, 1), t), np.ones(n, dtype=np.int64)), Antichain([t + 1]))
    merges = [m for m in trace.items if isinstance(m, Merge)]
    assert merges, "with one unit of fuel the merge of two 100-update batches is still in progress"
    assert trace.stats()["batches"] == 2 and trace.stats()["records"] == 200
    assert 0 < trace.stats()["merge_work"] < 200
    settle(trace)
    assert all(isinstance(b, TrieBatch) for b in trace.items)
    assert trace.stats()["merge_work"] == 200 and trace.stats()["batches"] == 1


def test_a_new_reader_after_the_last_drop_starts_where_the_trace_is_exact():
    """A reader may compact past the upper; once it is dropped, a new handle must not start behind that."""
    trace = Spine(1)
    h = trace.handle()
    h.set_logical_compaction(Antichain([10]))
    h.set_physical_compaction(Antichain([10]))
    trace.insert(keyed([(1, 1, 0, 1)]), Antichain([1]))
    trace.insert(keyed([(2, 2, 1, 1)]), Antichain([2]))  # merges with the first, times advanced to 10
    h.drop()
    reader = trace.handle()
    assert reader.logical.dominates(Antichain([10])), f"new reader at {reader.logical}, trace compacted to 10"
    check(trace, [reader], [keyed([(1, 1, 0, 1)]), keyed([(2, 2, 1, 1)])], 1)


def test_a_new_reader_after_the_last_drop_sees_merges_advanced_while_in_progress():
    """Merges in progress advance by the frontier of the moment: a later reader must start after it too."""
    trace = Spine(1, config=fuel(1, 1))
    h = trace.handle()
    h.set_logical_compaction(Antichain([1]))
    h.set_physical_compaction(Antichain([100]))
    first = keyed([(k, 0, 0, 1) for k in range(6)])
    second = keyed([(k, 1, 1, 1) for k in range(6)])
    trace.insert(first, Antichain([1]))
    trace.insert(second, Antichain([2]))
    assert any(isinstance(m, Merge) for m in trace.items), "the merge is still in progress"
    h.set_logical_compaction(Antichain([10]))
    settle(trace)  # the rest of the merge advances times to 10
    h.drop()
    reader = trace.handle()
    check(trace, [reader], [first, second], 1)


def test_a_merge_whose_sum_leaves_int64_raises_and_keeps_the_batches():
    """Merging must never wrap a sum of diffs: the trace raises DiffError naming the key, val and time,
    and keeps both batches (nothing is lost)."""
    big = 2**63 - 1
    trace = Spine(1)
    reader = trace.handle()
    reader.set_logical_compaction(Antichain([10]))
    trace.insert(keyed([(7, 3, 0, big)]), Antichain([1]))
    reader.set_physical_compaction(Antichain([2]))
    with pytest.raises(DiffError, match="outside int64") as info:
        trace.insert(keyed([(7, 3, 1, big)]), Antichain([2]))
        settle(trace)
    assert info.value.record_ids == (7, 3) and info.value.time == (10,)
    assert sorted(rows(trace.contents())) == [((7, 3), (0,), big), ((7, 3), (1,), big)]
    assert len(trace) == 2
