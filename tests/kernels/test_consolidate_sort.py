"""The radix sort under consolidation against numpy's sort: keys of any width, payload bits below the
sorted range, values moved with their keys, equal keys, sorted and reversed inputs, sizes around the
sort's bucket thresholds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.sorting import FINISH, SMALL, radix_sort


def check(keys: np.ndarray, lo_bit: int, hi_bit: int, with_vals: bool) -> None:
    vals = np.arange(len(keys), dtype=np.int64) * 7 - 3 if with_vals else None
    k = keys.copy()
    v = None if vals is None else vals.copy()
    radix_sort(k, v, lo_bit, hi_bit)
    shift = np.uint64(lo_bit)
    assert (k >> shift).tolist() == np.sort(keys >> shift).tolist()
    assert sorted(k.tolist()) == sorted(keys.tolist())  # payloads travel with their keys
    if vals is not None:
        assert sorted(zip(k.tolist(), v.tolist())) == sorted(zip(keys.tolist(), vals.tolist()))


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_radix_sort_matches_numpy(data):
    hi_bit = data.draw(st.integers(1, 64))
    lo_bit = data.draw(st.integers(0, hi_bit))
    keys = data.draw(st.lists(st.integers(0, 2**hi_bit - 1), max_size=60))
    check(np.array(keys, dtype=np.uint64), lo_bit, hi_bit, data.draw(st.booleans()))


@pytest.mark.parametrize("n", [SMALL, SMALL + 1, FINISH, FINISH + 1, 3 * FINISH, 200_000])
@pytest.mark.parametrize("kind", ["random", "few", "equal", "sorted", "reversed", "top-bits"])
def test_radix_sort_sizes_and_shapes(n, kind):
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    if kind == "few":
        keys = keys % np.uint64(5)
    elif kind == "equal":
        keys[:] = keys[0]
    elif kind == "sorted":
        keys.sort()
    elif kind == "reversed":
        keys = np.sort(keys)[::-1].copy()
    elif kind == "top-bits":  # keys differing only in their highest bits, payload below
        keys = (keys >> np.uint64(61)) << np.uint64(61) | (keys & np.uint64(0xFF))
    for lo_bit in (0, 8, 63):
        check(keys, lo_bit, 64, with_vals=lo_bit == 8)
