"""The consolidation kernel against its reference: random rows of 1-3 data columns and 1-3 time
coordinates, with small, wide and extreme int64 values, equal rows, sorted inputs, and diffs whose
sums leave int64 (refused, naming the first such row in order, as the reference does)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.consolidate import (
    SumOverflow,
    add,
    consolidate,
    consolidate_reference,
)

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
small = st.integers(-3, 3)
extreme = st.sampled_from([I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX])
anywhere = st.integers(I64_MIN, I64_MAX)
values = st.one_of(small, extreme, anywhere)
diff_values = st.one_of(st.integers(-3, 3), st.sampled_from([2**62, -(2**62), I64_MAX, I64_MIN, 2**61 + 3]))
kernels = settings(deadline=None, max_examples=300)


@st.composite
def batches(draw, values=values, diffs=diff_values):
    k = draw(st.integers(1, 3))
    d = draw(st.integers(1, 3))
    distinct = draw(st.lists(st.tuples(st.tuples(*[values] * k), st.tuples(*[values] * d)), min_size=1, max_size=8))
    rows = draw(st.lists(st.tuples(st.sampled_from(distinct), diffs), max_size=40))
    if draw(st.booleans()):  # sometimes already in order
        rows.sort()
    data = [np.array([r[0][0][j] for r in rows], dtype=np.int64) for j in range(k)]
    times = np.array([r[0][1] for r in rows], dtype=np.int64).reshape(len(rows), d)
    return data, times, np.array([r[1] for r in rows], dtype=np.int64)


def check(data, times, diffs) -> None:
    """The kernel's output equals the reference's, or both refuse the same row."""
    try:
        want = consolidate_reference(data, times, diffs)
    except SumOverflow as exc:
        with pytest.raises(SumOverflow) as got:
            consolidate(data, times, diffs)
        assert (got.value.data, got.value.time) == (exc.data, exc.time)
        return
    got = consolidate(data, times, diffs)
    if got is None:  # "consolidated already": then the input is the answer
        got = (tuple(data), times, diffs)
    assert len(got[0]) == len(want[0])
    for g, w in zip(got[0], want[0]):
        assert g.dtype == np.int64 and g.tolist() == w.tolist()
    assert got[1].shape == want[1].shape and got[1].tolist() == want[1].tolist()
    assert got[2].tolist() == want[2].tolist()


@kernels
@given(batches())
def test_consolidate_matches_the_reference(batch):
    check(*batch)


@kernels
@given(batches(values=st.one_of(small, st.integers(0, 2**20)), diffs=st.integers(-2, 2)))
def test_packed_path_matches_the_reference(batch):
    check(*batch)


def test_edge_cases():
    e = np.empty(0, dtype=np.int64)
    assert consolidate([e], np.empty((0, 2), dtype=np.int64), e) is None
    one = np.array([I64_MIN]), np.array([[I64_MAX, I64_MIN]]), np.array([I64_MAX])
    assert consolidate([one[0]], one[1], one[2]) is None  # one non-zero row: consolidated as it is
    _, times, diffs = consolidate([np.array([5])], np.array([[1]]), np.array([0]))
    assert len(diffs) == 0 and times.shape == (0, 1)
    for d in (1, 2, 3):  # all rows equal: one row, or nothing when they cancel
        n = 1000
        ones = np.ones(n, dtype=np.int64)
        out = consolidate([np.full(n, I64_MAX)], np.full((n, d), I64_MIN), ones)
        assert out[0][0].tolist() == [I64_MAX] and out[1].tolist() == [[I64_MIN] * d] and out[2].tolist() == [n]
        alternating = np.where(np.arange(n) % 2, 1, -1)
        assert len(consolidate([np.full(n, 7)], np.zeros((n, d), dtype=np.int64), alternating)[2]) == 0


def test_sums_that_leave_int64_midway_are_exact():
    data, times = [np.zeros(3, dtype=np.int64)], np.zeros((3, 1), dtype=np.int64)
    assert consolidate(data, times, np.array([2**62, 2**62, -(2**62)]))[2].tolist() == [2**62]
    assert consolidate(data, times, np.array([I64_MIN, -1, 1]))[2].tolist() == [I64_MIN]
    with pytest.raises(SumOverflow) as exc:
        consolidate(data, times, np.array([2**62, 2**62, 1]))
    assert exc.value.data == (0,) and exc.value.time == (0,)
    with pytest.raises(SumOverflow):
        consolidate(data, times, np.array([I64_MIN, -1, 0]))


@pytest.mark.parametrize("data", [[0, 0, 1, 1], [I64_MIN, I64_MIN, I64_MAX, I64_MAX]], ids=["packed", "general"])
def test_an_overflowing_run_before_others_is_refused(data):
    """The first run overflows, the last does not: the refusal names the first row."""
    cols, times = [np.array(data, dtype=np.int64)], np.full((4, 2), 9, dtype=np.int64)
    with pytest.raises(SumOverflow) as exc:
        consolidate(cols, times, np.array([2**62, 2**62, 1, 1]))
    assert exc.value.data == (data[0],) and exc.value.time == (9, 9)
    with pytest.raises(SumOverflow):  # and unsorted
        consolidate([cols[0][::-1].copy()], times, np.array([1, 1, 2**62, 2**62]))


@kernels
@given(batches(values=st.integers(0, 3), diffs=st.sampled_from([2**62, -(2**62), 1, -1])))
def test_packed_path_with_huge_diffs_matches_the_reference(batch):
    check(*batch)


@settings(deadline=None, max_examples=200)
@given(st.lists(st.sampled_from([2**62, -(2**62), I64_MAX, I64_MIN, 1, -1, 0]), min_size=1, max_size=6))
def test_add_counts_wraps_exactly(xs):
    total, carry = xs[0], 0
    for x in xs[1:]:
        total, carry = add(total, carry, x)
    assert total + carry * 2**64 == sum(xs)


@pytest.mark.parametrize("shape", ["packed", "wide", "folded"])
def test_large_batches_match_the_reference(shape):
    """Big enough for the radix sort's deep buckets; ``wide`` ranks the widest column, ``folded`` also
    folds the least significant columns into their ranks (three ~60-bit columns)."""
    rng = np.random.default_rng(11)
    n = 30_000
    if shape == "packed":
        data = [rng.integers(0, 5_000, n), rng.integers(0, 3, n)]
        times = rng.integers(0, 1_000, (n, 2))
    elif shape == "wide":
        data = [rng.integers(I64_MIN, I64_MAX, n, endpoint=True)]
        data[0][::3] = data[0][0]
        times = rng.integers(0, 50, (n, 1))
    else:
        data = [rng.integers(0, 2**60, n) for _ in range(2)]
        for c in data:
            c[::2] = c[0]
        times = rng.integers(-(2**60), 2**60, (n, 1))
        times[::4] = times[0]
    diffs = rng.integers(-2, 3, n)
    check(data, times, diffs)
    check([c[::-1].copy() for c in data], times[::-1].copy(), diffs[::-1].copy())
