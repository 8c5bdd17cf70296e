"""The compiled frontier test (which rows of a times array are beyond an antichain) against its
reference: depth 1-3, empty frontiers and batches, one row, int64 extremes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.frontier import Antichain
from ddflow.operators.kernels import frontier as kf

MIN, MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
coordinate = st.one_of(st.integers(-3, 3), st.sampled_from([MIN, MAX]))


@st.composite
def cases(draw):
    depth = draw(st.integers(1, 3))
    row = st.lists(coordinate, min_size=depth, max_size=depth)
    times = np.array(draw(st.lists(row, max_size=20)), dtype=np.int64).reshape(-1, depth)
    frontier = np.array(draw(st.lists(row, max_size=4)), dtype=np.int64).reshape(-1, depth)
    return times, frontier


@settings(max_examples=300, deadline=None)
@given(cases())
def test_beyond_matches_reference(case):
    times, frontier = case
    mask, count = kf.beyond(times, frontier)
    want, want_count = kf.beyond_reference(times, frontier)
    assert mask.tolist() == want.tolist() and count == want_count


@settings(max_examples=200, deadline=None)
@given(cases())
def test_antichain_split_agrees_with_the_kernel_reference(case):
    times, elements = case
    frontier = Antichain(map(tuple, elements.tolist()))
    mask, count = frontier.split(times)
    want, want_count = kf.beyond_reference(times, frontier.array(times.shape[1]))
    assert mask.tolist() == want.tolist() and count == want_count
    assert frontier.beyond(times).tolist() == want.tolist()
    strided = np.repeat(times, 2, axis=0)[::2]  # a non-contiguous view of the same rows
    assert frontier.split(strided)[0].tolist() == want.tolist()


@st.composite
def loop_cases(draw):
    depth = draw(st.integers(2, 4))
    row = st.lists(coordinate, min_size=depth, max_size=depth)
    outer_row = st.lists(coordinate, min_size=depth - 1, max_size=depth - 1)
    times = np.array(draw(st.lists(row, max_size=20)), dtype=np.int64).reshape(-1, depth)
    outer = np.array(draw(st.lists(outer_row, max_size=3)), dtype=np.int64).reshape(-1, depth - 1)
    return times, outer


@settings(max_examples=300, deadline=None)
@given(loop_cases())
def test_least_ready_matches_reference(case):
    times, outer = case
    assert kf.least_ready(times, outer) == kf.least_ready_reference(times, outer)
