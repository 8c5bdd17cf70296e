"""Lookup, flatten, expand and trie building against their references."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from trie_strategies import Trie, as_rows, columns, depths, huge_diffs, ints, kernels, rows, table, time

from ddflow.operators.kernels import lookup, trie
from ddflow.operators.kernels.consolidate import SumOverflow, consolidate_reference


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
        ko, va, up, ri, end = trie.layout(t.nk, t.nv, t.n, d)
        b = t.buffer
        want = lookup.expand_reference(b[:ko], b[ko:va], b[va:up].reshape(-1, 2), b[up:ri].reshape(t.n, d + 1), lo, hi)
        got = lookup.expand(b, t.nk, t.nv, t.n, d, lo, hi)
        assert as_rows(got) == as_rows(want) == [r for r in as_rows(t.cols) if r[0] in set(b[lo:hi].tolist())]


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


@kernels
@given(st.data())
def test_indexed_tries_build_and_search_like_the_references(data):
    """Tries of at least ``trie.INDEXED`` keys carry a radix index; searches of few keys go through it."""
    d = data.draw(depths)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    nk = trie.INDEXED + data.draw(st.integers(0, 3 * trie.BUCKET))
    spread = data.draw(st.sampled_from(["even", "skewed", "extremes"]))
    if spread == "even":
        keys = np.sort(rng.choice(20 * nk, nk, replace=False)).astype(np.int64)
    else:  # most keys in a few buckets: searches fall back to bisecting large buckets
        keys = np.unique(np.concatenate([rng.choice(2 * nk, nk - 20, replace=False), rng.integers(0, 2**40, 20)]))
        if spread == "extremes":
            keys = np.unique(np.concatenate([keys[2:-2], [-(2**63), -(2**63) + 1, 2**63 - 2, 2**63 - 1]]))
    keys = keys.astype(np.int64)
    t = Trie([(int(k), int(k) % 3, (int(k) % 5,) * d, 1) for k in keys], d)
    assert t.buffer.tolist() == trie.build_reference(*t.cols).tolist()
    assert len(t.buffer) == trie.size(t.nk, t.nv, t.n, d) > 2 * t.nk + 2 * t.nv + 2 + t.n * (d + 1)
    query = np.concatenate([rng.choice(keys, data.draw(st.integers(0, 20))), keys[:3] - 1, keys[-3:] + 1,
                            np.asarray(data.draw(st.lists(ints, max_size=5)), dtype=np.int64)])
    got = lookup.lookup(query, table([t]), d)
    assert as_rows(got) == as_rows(lookup.lookup_reference(query, [t.cols]))


@kernels
@given(st.data())
def test_build_into_a_given_buffer_equals_build(data):
    d = data.draw(depths)
    cols = columns(data.draw(rows(d)), d)
    nk, nv = trie.count(cols[0], cols[1])
    buf = np.full(trie.size(nk, nv, len(cols[0]), d), -5, dtype=np.int64)
    assert trie.build_into(buf, *cols, nk, nv) == buf.ctypes.data
    assert buf.tolist() == trie.build(*cols)[0].tolist()


@kernels
@given(st.data())
def test_build_small_consolidates_and_builds_like_the_references(data):
    """Unsorted keyed updates with repeats, zero diffs and sums outside int64, up to ``trie.SMALL``."""
    d = data.draw(depths)
    huge = data.draw(st.booleans())
    diffs = st.one_of(st.integers(-3, 3), huge_diffs) if huge else st.integers(-3, 3)
    m = data.draw(st.sampled_from([0, 1, 2, 5, 20, trie.SMALL]))
    drawn = data.draw(st.lists(st.tuples(ints, ints, time(d), diffs), min_size=m, max_size=m))
    if drawn and data.draw(st.booleans()):  # many repeats of a few rows
        drawn = [drawn[i % 3] if i % 3 < len(drawn) else drawn[0] for i in range(len(drawn))]
    keys, vals, dif = (np.asarray([r[j] for r in drawn], dtype=np.int64) for j in (0, 1, 3))
    times = np.asarray([r[2] for r in drawn], dtype=np.int64).reshape(m, d)
    room = trie.size(m, m, m, d)
    assert room == m * (d + 5) + 3  # the room TrieBatch.consolidating allocates
    out = np.full(room + 1, -7, dtype=np.int64)
    address, nk, nv, n, end, bad = trie.build_small(keys, vals, times, dif, out[:room])
    try:
        (k, v), t, x = consolidate_reference((keys, vals), times, dif)
    except SumOverflow:
        assert bad >= 0 and n == 0
        row = (int(keys[bad]), int(vals[bad]), tuple(times[bad].tolist()))
        total = sum(r[3] for r in drawn if (r[0], r[1], r[2]) == row)
        assert not -(2**63) <= total < 2**63
        return
    assert bad == -1 and address == out.ctypes.data and (n, end) == (len(x), trie.size(nk, nv, n, d))
    assert out[:end].tolist() == trie.build_reference(k, v, t, x).tolist()
    assert out[room] == -7  # nothing written past the room given


@kernels
@given(st.data())
def test_build_complete_seals_the_complete_rows_like_the_references(data):
    """An arrangement's step in one call: unsorted keyed updates with repeats, zero diffs and sums
    outside int64, some beyond a frontier of 0-3 times; the trie and flat columns of the complete
    ones, and the indices of the others."""
    d = data.draw(depths)
    huge = data.draw(st.booleans())
    diffs = st.one_of(st.integers(-3, 3), huge_diffs) if huge else st.integers(-3, 3)
    m = data.draw(st.sampled_from([0, 1, 2, 5, 20, trie.SMALL]))
    drawn = data.draw(st.lists(st.tuples(ints, ints, time(d), diffs), min_size=m, max_size=m))
    if drawn and data.draw(st.booleans()):  # many repeats of a few rows
        drawn = [drawn[i % 3] if i % 3 < len(drawn) else drawn[0] for i in range(len(drawn))]
    keys, vals, dif = (np.asarray([r[j] for r in drawn], dtype=np.int64) for j in (0, 1, 3))
    times = np.asarray([r[2] for r in drawn], dtype=np.int64).reshape(m, d)
    frontier = np.asarray(data.draw(st.lists(time(d), max_size=3)), dtype=np.int64).reshape(-1, d)
    room = trie.size(m, m, m, d)
    out = np.full(room + 1, -7, dtype=np.int64)
    flat = np.full(m * (d + 3) + 1, -7, dtype=np.int64)
    pending = np.full(m + 1, -7, dtype=np.int64)
    address, nk, nv, n, end, bad, waiting = trie.build_complete(keys, vals, times, dif, frontier, out[:room],
                                                                flat[:-1], pending[:-1])
    try:
        want_trie, want_flat, want_pending = trie.build_complete_reference(keys, vals, times, dif, frontier)
    except SumOverflow:
        assert bad >= 0 and n == 0
        row = (int(keys[bad]), int(vals[bad]), tuple(times[bad].tolist()))
        total = sum(r[3] for r in drawn if (r[0], r[1], r[2]) == row)
        assert not -(2**63) <= total < 2**63
        return
    assert bad == -1 and address == out.ctypes.data and end == trie.size(nk, nv, n, d)
    assert out[:end].tolist() == want_trie.tolist()
    assert flat[: n * (d + 3)].tolist() == want_flat.tolist()
    assert pending[:waiting].tolist() == want_pending.tolist()
    assert out[room] == flat[-1] == pending[-1] == -7  # nothing written past the room given


@kernels
@given(st.data())
def test_lookup_in_tries_of_one_val_per_key_or_one_update_per_val(data):
    """Tries whose shape lets the gather skip reads (one val per key: ``nk == nv``; one update per val:
    ``nv == n``; both), alone and beside general ones in one table, against the reference."""
    d = data.draw(depths)
    tries = []
    for shape in data.draw(st.lists(st.sampled_from(["one val", "one update", "both", "any"]), max_size=4)):
        drawn = data.draw(rows(d, max_size=10))
        if shape in ("one val", "both"):  # keep the first val of each key
            firsts = {}
            for k, v, _t, _x in drawn:
                firsts.setdefault(k, v)
            drawn = [r for r in drawn if r[1] == firsts[r[0]]]
        if shape in ("one update", "both"):  # keep the first time of each (key, val)
            seen = set()
            drawn = [r for r in drawn if (r[0], r[1]) not in seen and not seen.add((r[0], r[1]))]
        t = Trie(drawn, d)
        assert shape not in ("one val", "both") or t.nk == t.nv
        assert shape not in ("one update", "both") or t.nv == t.n
        tries.append(t)
    keys = [r[0] for t in tries for r in as_rows(t.cols)]
    query = np.asarray(keys + data.draw(st.lists(ints, max_size=6)), dtype=np.int64)
    got = lookup.lookup(query, table(tries), d)
    assert as_rows(got) == as_rows(lookup.lookup_reference(query, [t.cols for t in tries]))
