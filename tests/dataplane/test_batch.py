"""Columnar update batches: consolidation, concatenation and the complete/pending split."""

from __future__ import annotations

import numpy as np
import pytest
from dataplane_oracle import (
    accumulation,
    antichains,
    dataplane,
    depths,
    grid,
    make_updates,
    rows,
    updates,
)
from hypothesis import given
from hypothesis import strategies as st

from ddflow.operators.traces.batch import Updates, beyond_split, concat, consolidate


@dataplane
@given(st.data())
def test_consolidation_preserves_accumulations_at_every_time(data):
    d = data.draw(depths)
    width = data.draw(st.integers(1, 3))
    u = data.draw(updates(d, width=width))
    c = consolidate(u)
    for s in grid(d):
        assert accumulation(c, s) == accumulation(u, s), f"at {s}"
    got = rows(c)
    # sorted by (data, time), one row per (data, time), no zero diffs
    keys = [(data_, time) for data_, time, _ in got]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(diff != 0 for _, _, diff in got)
    sums: dict = {}
    for data_, time, diff in rows(u):
        sums[(data_, time)] = sums.get((data_, time), 0) + diff
    assert {(k, t): v for k, t, v in got} == {k: v for k, v in sums.items() if v != 0}
    assert rows(consolidate(c)) == got  # idempotent


@dataplane
@given(st.data())
def test_concat_keeps_every_update_in_order(data):
    d = data.draw(depths)
    parts = data.draw(st.lists(updates(d), max_size=4))
    c = concat(parts, 2, d)
    assert rows(c) == [r for p in parts for r in rows(p)]
    assert c.times.shape == (len(c), d)


def test_concat_of_nothing_needs_a_shape():
    with pytest.raises(ValueError, match="width and depth"):
        concat([])
    assert len(concat([], 2, 3)) == 0 and concat([], 2, 3).times.shape == (0, 3)


@dataplane
@given(st.data())
def test_beyond_split_partitions_by_the_frontier(data):
    d = data.draw(depths)
    u = data.draw(updates(d))
    f = data.draw(antichains(d))
    complete, pending = beyond_split(u, f)
    assert all(not f.less_equal(t) for _, t, _ in rows(complete))
    assert all(f.less_equal(t) for _, t, _ in rows(pending))
    assert sorted(rows(complete) + rows(pending)) == sorted(rows(u))


def test_consolidation_keeps_negative_multiplicities_and_drops_zeros():
    u = make_updates([(1, 0), (1, 0), (2, 0), (2, 0), (3, 0)], [(5,), (5,), (5,), (5,), (7,)], [1, -3, 2, -2, 0], 2, 1)
    assert rows(consolidate(u)) == [((1, 0), (5,), -2)]


def test_consolidation_of_large_random_batch_matches_a_dict_sum():
    rng = np.random.default_rng(7)
    n = 200_000
    u = Updates(
        (rng.integers(0, 500, n), rng.integers(0, 5, n)),
        rng.integers(0, 50, (n, 2)),
        rng.choice(np.asarray([-1, 1]), n),
    )
    c = consolidate(u)
    want: dict = {}
    for k, v, t0, t1, diff in zip(*u.data, u.times[:, 0], u.times[:, 1], u.diffs, strict=True):
        key = (int(k), int(v), int(t0), int(t1))
        want[key] = want.get(key, 0) + int(diff)
    want = {k: v for k, v in want.items() if v}
    got = {(k, v, t[0], t[1]): diff for (k, v), t, diff in rows(c)}
    assert got == want
    assert list(got) == sorted(got)
