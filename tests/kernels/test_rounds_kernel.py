"""The interning kernels (pair hashes, group claims, counts) against their plain references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels import rounds
from ddflow.operators.partition import element_hash, key_hash

I64 = st.integers(-(2**63), 2**63 - 1)
EDGES = st.sampled_from([0, 1, -1, -2, 2**61 - 2, 2**61 - 1, 2**61, -(2**61 - 1), -(2**61), 2**63 - 1, -(2**63)])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), st.lists(I64 | EDGES, max_size=40), st.sampled_from([0, 1, 2, 24, 2**31, 2**62 + 7]))
def test_pair_hashes_agree_with_cpython(round_, elements, modulus):
    e = np.array(elements, dtype=np.int64)
    assert np.array_equal(rounds.pair_hashes(round_, e, modulus), rounds.ref_pair_hashes(round_, e, modulus))


def test_pair_hashes_are_the_key_hash_of_the_pair():
    values = [0, 1, -1, 2**62, -(2**63), "abc", "", b"x", None, 1.5, (1, "x"), (2, 3), True]
    e = np.array([element_hash(v) for v in values], dtype=np.int64)
    for round_ in (0, 1, 7):
        assert rounds.pair_hashes(round_, e, 0).tolist() == [key_hash((round_, v)) for v in values]
        assert rounds.pair_hashes(round_, e, 24).tolist() == [key_hash((round_, v)) % 24 for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 4), st.integers(-3, 3)), max_size=50),
       st.lists(st.sampled_from([rounds.SINGLE, rounds.MULTI, rounds.WATCHED]), min_size=8, max_size=8),
       st.lists(st.integers(-1, 4), min_size=8, max_size=8))
def test_claim_and_add_counts_agree_with_references(updates, status, first):
    groups = np.array([g for g, _, _ in updates], dtype=np.int64)
    records = np.array([r for _, r, _ in updates], dtype=np.int64)
    diffs = np.array([d for _, _, d in updates], dtype=np.int64)
    got_first, got_status = np.array(first, dtype=np.int32), np.array(status, dtype=np.int8)
    ref_first, ref_status = got_first.copy(), got_status.copy()
    became = rounds.claim(groups, records, got_first, got_status)
    assert became.tolist() == rounds.ref_claim(groups, records, ref_first, ref_status).tolist()
    assert np.array_equal(got_first, ref_first) and np.array_equal(got_status, ref_status)
    counts = np.array([0, 5, -5, 2**63 - 1, -(2**63), 1, 2, 3], dtype=np.int64)
    ref_counts = counts.copy()
    rounds.add_counts(groups, diffs, got_status, counts)
    rounds.ref_add_counts(groups, diffs, ref_status, ref_counts)
    assert np.array_equal(counts, ref_counts)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**40), st.lists(I64 | EDGES, max_size=40), st.sampled_from([0, 1, 24, 2**62 + 7]))
def test_pair_hashes_into_writes_the_hashes_over_the_elements(round_, elements, modulus):
    e = np.array(elements, dtype=np.int64)
    want = rounds.ref_pair_hashes(round_, e, modulus)
    got = rounds.pair_hashes_into(round_, e, modulus)
    assert np.array_equal(got, want) and np.array_equal(e, want)  # over the column given
