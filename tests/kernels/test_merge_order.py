"""The merge sort of rows the reduction kernels share, against a stable numpy lexsort: any number of
columns, many equal rows (ties keep their index order), int64 extremes, sizes around the merge's
widths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support import profiles

from ddflow.operators.kernels.sorting import merge_order, merge_order_reference

MIN, MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
value = st.one_of(st.integers(-3, 3), st.sampled_from([MIN, MIN + 1, MAX - 1, MAX]), st.integers(MIN, MAX))


@settings(max_examples=profiles.at_most(200), deadline=None)
@given(st.integers(1, 3).flatmap(lambda c: st.lists(st.lists(value, min_size=c, max_size=c), max_size=150)
                                 .map(lambda rows: np.array(rows, np.int64).reshape(len(rows), c))))
def test_merge_order_is_the_stable_lexicographic_order(keys):
    got = merge_order(keys)
    assert got.tolist() == merge_order_reference(keys).tolist()


def test_merge_order_edge_cases():
    for n in (0, 1, 2, 63, 64, 65, 257):
        equal = np.zeros((n, 2), np.int64)
        assert merge_order(equal).tolist() == list(range(n))  # all equal: index order
        down = np.arange(n, dtype=np.int64)[::-1].reshape(n, 1).copy()
        assert merge_order(down).tolist() == list(range(n))[::-1]
        assert merge_order_reference(down).tolist() == list(range(n))[::-1]
