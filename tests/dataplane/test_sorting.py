"""Row ordering of integer columns: packed sorts agree with Python's tuple order, whether the columns
fit in 63 bits (packed) or not (lexsort fallback)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.sorting import (
    argsort,
    distinct,
    order,
    pack,
    ranks,
    starts,
    take,
    unique_rows,
)

small = st.integers(-50, 50)
huge = st.integers(-(2**62), 2**62)


def columns(values):
    return st.integers(1, 3).flatmap(
        lambda w: st.lists(st.tuples(*[values] * w), max_size=40).map(
            lambda rows: [np.array([r[j] for r in rows], dtype=np.int64) for j in range(w)]))


@settings(max_examples=200, deadline=None)
@given(st.one_of(columns(small), columns(huge)))
def test_order_and_unique_rows_match_tuple_order(cols):
    rows = list(zip(*(c.tolist() for c in cols)))
    o = order(cols)
    assert list(zip(*(c[o].tolist() for c in cols))) == sorted(rows)
    got = unique_rows(cols)
    assert list(zip(*(c.tolist() for c in got))) == sorted(set(rows))
    key = pack(cols)
    if key is not None and len(rows):
        assert np.argsort(key, kind="stable").tolist() == sorted(range(len(rows)), key=rows.__getitem__)
    sorted_cols = [c[o] for c in cols]
    mask = starts(sorted_cols) if len(rows) else np.empty(0, dtype=bool)
    assert mask.sum() == len(set(rows))


def test_columns_too_wide_to_pack_are_ranked_first():
    rng = np.random.default_rng(3)
    cols = [rng.integers(-(2**62), 2**62, 500), rng.integers(0, 3, 500), rng.integers(-(2**62), 2**62, 500)]
    cols[0][::7] = cols[0][0]  # ties in the first column so the later ones matter
    key = pack(cols)
    assert key is not None  # 3 x 63 bits of range, but dense ranks of 500 rows fit
    assert (np.argsort(key, kind="stable") == np.lexsort(tuple(reversed(cols)))).all()


@given(st.lists(huge, max_size=50))
def test_ranks_is_unique_with_inverse(values):
    a = np.array(values, dtype=np.int64)
    uniq, inv = ranks(a)
    want_u, want_i = np.unique(a, return_inverse=True)
    assert uniq.tolist() == want_u.tolist() and inv.tolist() == want_i.reshape(-1).tolist()


def test_take_reads_masks_and_indices_like_indexing():
    a = np.arange(12, dtype=np.int64).reshape(6, 2)
    mask = np.array([True, False, True, True, False, False])
    idx = np.array([5, 0, 3])
    assert (take(a, mask) == a[mask]).all() and (take(a, idx) == a[idx]).all()
    assert (take(a[:, 0], mask) == a[mask, 0]).all()


@given(st.lists(huge, max_size=50))
def test_distinct_is_sorted_unique(values):
    a = np.array(values, dtype=np.int64)
    assert distinct(a).tolist() == sorted(set(values))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(small, huge), max_size=60), st.booleans(), st.sampled_from([np.int64, np.int32]))
def test_argsort_orders_keys_with_ties_in_index_order(values, runs, dtype):
    """Packed (index below key) and fallback (keys too wide to share 63 bits with an index) alike."""
    if dtype is np.int32:
        values = [v % 2**31 - 2**30 for v in values]
    key = np.array(values, dtype=dtype)
    if runs:  # two sorted runs, as a merge sees them
        key = np.concatenate([np.sort(key[: len(key) // 2]), np.sort(key[len(key) // 2:])])
    before = key.copy()
    got = argsort(key, runs)
    assert got.dtype == np.int64
    assert got.tolist() == sorted(range(len(key)), key=lambda i: (int(key[i]), i))
    assert (key == before).all()  # the key is left as it was


def test_argsort_of_a_large_narrow_key_is_a_stable_permutation():
    rng = np.random.default_rng(5)
    key = rng.integers(-1000, 1000, 200_000)
    got = argsort(key)
    assert (got == np.argsort(key, kind="stable")).all()
