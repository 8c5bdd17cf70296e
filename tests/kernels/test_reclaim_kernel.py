"""The compiled mark and sweep kernels against their references: ids reachable from roots through pairs,
and the free list of the rest."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.reclaim import mark, ref_mark, ref_sweep, sweep

COMPOSITE = np.array([False, True, False, True], dtype=bool)  # kinds 1 and 3 refer to two ids


@st.composite
def graphs(draw):
    n = draw(st.integers(0, 60))
    kinds = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int8)
    payload = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if COMPOSITE[kinds[i]]:
            a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
            payload[i] = (a << 32) | b
        else:
            payload[i] = draw(st.integers(-(2**63), 2**63 - 1))
    roots = np.array(draw(st.lists(st.integers(-3, n + 3), max_size=20)), dtype=np.int64)
    premarked = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return kinds, payload, roots, np.array(premarked, dtype=bool)


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_mark_agrees_with_reference(graph):
    kinds, payload, roots, premarked = graph
    got, want = premarked.copy(), premarked.copy()
    assert mark(roots, got, kinds, COMPOSITE, payload) == ref_mark(roots, want, kinds, COMPOSITE, payload)
    assert got.tolist() == want.tolist()


def test_a_long_chain_of_pairs_is_marked_without_recursion():
    n = 100_000
    kinds = np.ones(n, dtype=np.int8)
    kinds[0] = 0
    ids = np.arange(n, dtype=np.int64)
    payload = ((ids - 1) << 32) | np.maximum(ids - 2, 0)  # pair i = (i - 1, i - 2)
    payload[0] = 7
    marks = np.zeros(n, dtype=bool)
    assert mark(np.array([n - 1]), marks, kinds, COMPOSITE, payload) == n
    assert mark(np.array([n - 1, 5]), marks, kinds, COMPOSITE, payload) == 0
    assert mark(np.empty(0, dtype=np.int64), marks, kinds, COMPOSITE, payload) == 0


@settings(max_examples=200, deadline=None)
@given(graphs(), st.integers(0, 70))
def test_sweep_agrees_with_reference(graph, n):
    kinds, _payload, _roots, marks = graph
    free = 5
    kinds = np.where(np.arange(len(kinds)) % 7 == 3, free, kinds).astype(np.int8)  # some free already
    n = min(n, len(kinds))
    reported = np.array([False, False, True, True, False, False, False, False])
    a, b = kinds.copy(), kinds.copy()
    got = sweep(a, marks, n, free, reported)
    want = ref_sweep(b, marks, n, free, reported)
    assert (got[0], got[1].tolist(), got[2].tolist(), got[3]) == (want[0], want[1].tolist(), want[2].tolist(), want[3])
    assert a.tolist() == b.tolist()
