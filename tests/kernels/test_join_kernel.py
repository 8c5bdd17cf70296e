"""The compiled join pass against its reference on random key-sorted sides (depth 1-3, empty sides,
one row, all rows equal, long runs of one key, int64 extremes, products beyond int64)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels import join as kj
from ddflow.operators.traces.batch import Updates

MIN, MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


@st.composite
def cases(draw, extremes: bool):
    depth = draw(st.integers(1, 3))
    keys = st.integers(-3, 5) if not extremes else st.sampled_from([MIN, -1, 0, 7, MAX])
    time = st.tuples(*[st.integers(0, 5) for _ in range(depth)])
    diff = st.sampled_from([-2, -1, 1, 3]) if not extremes else st.sampled_from([MIN, MIN + 1, -1, 1, 2, MAX])
    row = st.tuples(keys, st.integers(0, 4), time, diff)
    a = draw(st.lists(row, max_size=12))
    b = draw(st.lists(row, max_size=30))
    if draw(st.booleans()) and a:  # all rows of a side equal
        a = [a[0]] * len(a)
    return depth, a, b, draw(st.sampled_from([1, -1]))


def columns(rows, depth):
    a = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    return Updates((a([r[0] for r in rows]), a([r[1] for r in rows])),
                   a([r[2] for r in rows]).reshape(len(rows), depth), a([r[3] for r in rows]))


def check(case):
    depth, a_rows, b_rows, sign = case
    a = columns(sorted(a_rows, key=lambda r: r[0]), depth)
    b = columns(sorted(b_rows, key=lambda r: r[0]), depth)
    args = (a.data[0], a.data[1], a.times, a.diffs, b.data[0], b.data[1], b.times, b.diffs, sign)
    *cols, bad = kj.join_sorted(*args)
    want, outside = kj.join_sorted_reference(*args)
    assert (bad >= 0) == outside
    if outside:  # the row named is a pair whose product is beyond int64
        key, va, vb, t = int(cols[0][bad]), int(cols[1][bad]), int(cols[2][bad]), tuple(cols[3][bad].tolist())
        assert any(ka == key == kb and xa == va and xb == vb and tuple(map(max, ta, tb)) == t
                   and not MIN <= da * db * sign <= MAX
                   for ka, xa, ta, da in zip(a.data[0].tolist(), a.data[1].tolist(), a.times.tolist(),
                                             a.diffs.tolist())
                   for kb, xb, tb, db in zip(b.data[0].tolist(), b.data[1].tolist(), b.times.tolist(),
                                             b.diffs.tolist()))
    else:
        got = sorted(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist(), map(tuple, cols[3].tolist()),
                         cols[4].tolist()))
        assert got == want


@settings(max_examples=200, deadline=None)
@given(cases(extremes=False))
def test_join_sorted_matches_reference(case):
    check(case)


@settings(max_examples=100, deadline=None)
@given(cases(extremes=True))
def test_join_sorted_extremes_and_overflow(case):
    check(case)


def test_join_sorted_gallops_over_many_keys_and_long_runs():
    keys = np.arange(0, 100_000, 3, dtype=np.int64)
    n = len(keys)
    ones = np.ones(n, dtype=np.int64)
    d = np.array([-5, 0, 3, 4, 99_999, 99_999, 200_000], dtype=np.int64)
    out = kj.join_sorted(d, d, np.zeros((7, 1), dtype=np.int64), np.ones(7, dtype=np.int64), keys, keys * 10,
                         np.zeros((n, 1), dtype=np.int64), ones, 1)
    assert out[0].tolist() == [0, 3, 99_999, 99_999] and out[2].tolist() == [0, 30, 999_990, 999_990]
    run = np.full(10_000, 7, dtype=np.int64)  # one key on both sides: every pair
    out = kj.join_sorted(run[:3], run[:3], np.zeros((3, 1), dtype=np.int64), np.ones(3, dtype=np.int64), run, run,
                         np.zeros((10_000, 1), dtype=np.int64), np.ones(10_000, dtype=np.int64), -1)
    assert len(out[0]) == 30_000 and (out[4] == -1).all()


@settings(max_examples=150, deadline=None)
@given(cases(extremes=False), st.integers(1, 3), st.booleans())
def test_join_traced_pairs_changes_with_the_trace_as_the_references_do(case, cuts, changes_first):
    """The join that looks the changes' keys up in a trace itself (cut into several batches): the
    reference lookup composed with the reference pairing."""
    from trie_strategies import Trie, table

    depth, a_rows, b_rows, _ = case
    changes = columns(sorted(a_rows, key=lambda r: r[0]), depth)
    tries = []
    for part in np.array_split(np.arange(len(b_rows)), cuts) if b_rows else []:
        sums: dict = {}
        for i in part.tolist():
            key, val, t, d = b_rows[i]
            sums[(key, val, t)] = sums.get((key, val, t), 0) + d
        kept = sorted((key, val, t, d) for (key, val, t), d in sums.items() if d)
        if kept:
            tries.append(Trie(kept, depth))
    c = (changes.data[0], changes.data[1], changes.times, changes.diffs)
    out, n, bad = kj.join_traced(*c, table(tries), changes_first)
    assert out.shape == (n * (4 + depth),)
    cols = (out[:n], out[n : 2 * n], out[2 * n : 3 * n], out[4 * n :].reshape(n, depth), out[3 * n : 4 * n])
    want, outside = kj.join_traced_reference(*c, [t.cols for t in tries], changes_first)
    assert bad < 0 and not outside  # small diffs: no product leaves int64
    got = sorted(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist(), map(tuple, cols[3].tolist()),
                     cols[4].tolist()))
    assert got == want
    assert not changes_first or all(r[1] in {x[1] for x in a_rows} for r in got)  # the changes' vals come first
