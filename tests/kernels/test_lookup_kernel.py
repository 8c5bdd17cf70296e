"""Lookup, flatten, expand and trie building against their references."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from trie_strategies import Trie, as_rows, columns, depths, ints, kernels, rows, table

from ddflow.operators.kernels import lookup, trie


@kernels
@given(st.data())
def test_build_equals_the_reference(data):
    d = data.draw(depths)
    cols = columns(data.draw(rows(d)), d)
    buf, address, nk, nv = trie.build(*cols)
    assert buf.tolist() == trie.build_reference(*cols).tolist()
    assert len(buf) == trie.size(nk, nv, len(cols[0]), d) and address == buf.ctypes.data


@kernels
@given(st.data())
def test_lookup_equals_the_reference(data):
    d = data.draw(depths)
    tries = [Trie(data.draw(rows(d)), d) for _ in range(data.draw(st.integers(0, 4)))]
    query = np.asarray(data.draw(st.lists(ints, max_size=12)), dtype=np.int64)
    got = lookup.lookup(query, table(tries), d)
    want = lookup.lookup_reference(query, [t.cols for t in tries])
    assert as_rows(got) == as_rows(want)
    assert got[2].shape == (len(got[0]), d)


@kernels
@given(st.data())
def test_lookup_of_sparse_and_dense_queries(data):
    """Both search paths: queries much sparser than the keys (binary search) and denser (merge pass)."""
    d = 1
    keys = sorted(set(data.draw(st.lists(st.integers(-50, 50), min_size=1, max_size=60))))
    t = Trie([(k, k % 3, (k % 5,), 1) for k in keys], d)
    query = np.asarray(data.draw(st.lists(st.integers(-60, 60), max_size=data.draw(st.sampled_from([2, 80])))),
                       dtype=np.int64)
    got = lookup.lookup(query, table([t]), d)
    assert as_rows(got) == as_rows(lookup.lookup_reference(query, [t.cols]))


@kernels
@given(st.data())
def test_flatten_and_expand_equal_the_references(data):
    d = data.draw(depths)
    tries = [Trie(data.draw(rows(d)), d) for _ in range(data.draw(st.integers(0, 3)))]
    got = lookup.flatten(table(tries), d)
    assert as_rows(got) == [r for t in tries for r in as_rows(t.cols)]
    for t in tries:
        lo, hi = sorted(data.draw(st.tuples(st.integers(0, t.nk), st.integers(0, t.nk))))
        ko, va, vo, di, ti, end = trie.layout(t.nk, t.nv, t.n, d)
        b = t.buffer
        want = lookup.expand_reference(b[: t.nk], b[ko:va], b[va:vo], b[vo:di], lo, hi)
        got_k, got_v = lookup.expand(b, t.nk, t.nv, t.n, d, lo, hi)
        assert got_k.tolist() == want[0].tolist() and got_v.tolist() == want[1].tolist()


def test_lookup_at_scale_equals_isin():
    rng = np.random.default_rng(5)
    tries = []
    for t in range(3):
        n = 50_000
        keys = np.sort(rng.choice(1_000_000, n, replace=False))
        tries.append(Trie([(int(k), 0, (t,), 1) for k in keys], 1))
    query = rng.integers(0, 1_000_000, 2_000)
    keys, vals, times, diffs = lookup.lookup(query, table(tries), 1)
    expected = sorted((int(k), t) for t, tr in enumerate(tries) for k in tr.cols[0][np.isin(tr.cols[0], query)])
    assert list(zip(keys.tolist(), times[:, 0].tolist(), strict=True)) == expected
