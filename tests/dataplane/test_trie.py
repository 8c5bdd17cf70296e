"""Trie batches: layout, vectorized lookup of many keys, and fueled merges."""

from __future__ import annotations

import numpy as np
from dataplane_oracle import (
    accumulation,
    antichains,
    dataplane,
    depths,
    grid,
    rows,
    updates,
)
from hypothesis import given
from hypothesis import strategies as st

from ddflow.operators.frontier import Antichain
from ddflow.operators.lattice import T_MIN
from ddflow.operators.traces.batch import Updates, concat, consolidate
from ddflow.operators.traces.merge import Merge
from ddflow.operators.traces.trie import Description, TrieBatch


def desc(depth: int, since: Antichain | None = None) -> Description:
    low = Antichain([(T_MIN,) * depth])
    return Description((low, Antichain(), since if since is not None else low))


def batch_of(u: Updates) -> TrieBatch:
    return TrieBatch.from_updates(consolidate(u), desc(u.depth))


def keyed(draw, d: int, max_size: int = 40, key_range: int = 6) -> Updates:
    return draw(updates(d, width=2, max_size=max_size, data_range=key_range))


@dataplane
@given(st.data())
def test_trie_layout_round_trips(data):
    d = data.draw(depths)
    u = consolidate(keyed(data.draw, d))
    b = TrieBatch.from_updates(u, desc(d))
    assert rows(b.flat()) == rows(u) and len(b) == len(u)
    assert np.all(np.diff(b.keys) > 0)
    assert b.key_offs[0] == 0 and b.key_offs[-1] == len(b.vals) and np.all(np.diff(b.key_offs) > 0)
    assert b.val_offs[0] == 0 and b.val_offs[-1] == len(u) and np.all(np.diff(b.val_offs) > 0)
    for i in range(len(b.keys)):
        assert np.all(np.diff(b.vals[b.key_offs[i] : b.key_offs[i + 1]]) > 0)
    assert b.key_weights().tolist() == [sum(1 for (k, _), _, _ in rows(u) if k == key) for key in b.keys.tolist()]
    lo, hi = sorted(data.draw(st.tuples(st.integers(0, len(b.keys)), st.integers(0, len(b.keys)))))
    sub = set(b.keys[lo:hi].tolist())
    assert rows(b.flat(lo, hi)) == [r for r in rows(u) if r[0][0] in sub]


@dataplane
@given(st.data())
def test_batch_lookup_of_many_keys_equals_a_filter(data):
    d = data.draw(depths)
    b = batch_of(keyed(data.draw, d))
    query = np.unique(np.asarray(data.draw(st.lists(st.integers(-1, 8), max_size=8)), dtype=np.int64))
    wanted = set(query.tolist())
    assert rows(b.lookup(query)) == [r for r in rows(b.flat()) if r[0][0] in wanted]


def test_batch_lookup_at_scale_equals_isin():
    rng = np.random.default_rng(3)
    n = 300_000
    u = Updates((rng.integers(0, 50_000, n), rng.integers(0, 20, n)), rng.integers(0, 100, (n, 1)), np.ones(n, dtype=np.int64))
    b = batch_of(u)
    query = np.unique(rng.integers(-10, 60_000, 20_000))
    got = b.lookup(query)
    flat = b.flat()
    mask = np.isin(flat.data[0], query)
    for g, w in zip(got.data, flat.data, strict=True):
        assert np.array_equal(g, w[mask])
    assert np.array_equal(got.times, flat.times[mask]) and np.array_equal(got.diffs, flat.diffs[mask])


@dataplane
@given(st.data())
def test_fueled_merge_equals_advanced_consolidated_concat(data):
    d = data.draw(depths)
    older, newer = batch_of(keyed(data.draw, d)), batch_of(keyed(data.draw, d))
    f = data.draw(antichains(d))
    fuels = data.draw(st.lists(st.integers(0, 30), min_size=1, max_size=5))
    m = Merge(older, newer, f)
    steps = 0
    while not m.done:
        fuel = fuels[steps % len(fuels)] or 1
        before = m.work_done
        left = m.work(fuel)
        assert 0 <= left <= fuel
        assert m.work_done > before or m.done, "a merge given fuel makes progress"
        steps += 1
        assert steps <= len(older) + len(newer) + 2
    assert m.work_done == len(older) + len(newer) == len(m)
    result = m.result()
    want = consolidate(concat([older.flat(), newer.flat()], 2, d).advance_by(f))
    assert rows(result.flat()) == rows(want)
    assert result.desc == Description((older.desc.lower, newer.desc.upper, f))
    for s in grid(d):
        if f.less_equal(s):
            assert accumulation(result.flat(), s) == accumulation(concat([older.flat(), newer.flat()], 2, d), s)
