"""The compiled reduction round against its reference, on random rounds of depth 1-3: the points, the
desired outputs of every built-in mode, the times to revisit, the output diffs, and the overflow
statuses (int64 extremes among the diffs and vals)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import profiles

from ddflow.operators.kernels import reduce as kr
from ddflow.operators.kernels.reduce import diffs as kd

MIN, MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
MODES = [kr.GROUPS, kr.TOTAL, kr.LEAST, kr.TOP, kr.SUM, kr.POSITIVE]

diffs_st = st.one_of(st.sampled_from([-2, -1, 1, 2]), st.sampled_from([MIN, MAX, MAX - 1, MIN + 1]))
small_diffs = st.sampled_from([-2, -1, 1, 2])


@st.composite
def rounds(draw, extremes: bool = False):
    depth = draw(st.integers(1, 3))
    inner = draw(st.lists(st.integers(0, 3), min_size=depth - 1, max_size=depth - 1))
    n_keys = draw(st.integers(1, 4))
    keys = sorted(draw(st.lists(st.integers(-5, 50), min_size=n_keys, max_size=n_keys, unique=True)))
    cands = draw(st.lists(st.tuples(st.sampled_from(keys), st.integers(0, 8)), min_size=1, max_size=10))
    cand_keys = {k for k, _ in cands}
    for k in keys:  # every key of the round has a candidate
        if k not in cand_keys:
            cands.append((k, draw(st.integers(0, 8))))
    time = st.tuples(st.integers(0, 8), *[st.integers(0, 4) for _ in range(depth - 1)])
    d = diffs_st if extremes else small_diffs
    vals = st.integers(0, 5)
    in_rows = draw(st.lists(st.tuples(st.sampled_from(keys), vals, time, d), max_size=30))
    out_rows = draw(st.lists(st.tuples(st.sampled_from(keys), vals, time, d), max_size=15))
    # an order per val: distinct vals, distinct orders (ints, possibly huge, possibly negative)
    order = dict(zip(range(6), draw(st.permutations([-7, 0, 3, 10**17, -(10**18), MAX // 3]))))
    return depth, np.array(inner, dtype=np.int64), keys, cands, in_rows, out_rows, order


def columns(depth, keys, cands, in_rows, out_rows, order):
    a = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    t = lambda rows: a([r[2] for r in rows]).reshape(len(rows), depth)  # noqa: E731
    return dict(
        keys=a(keys), cand_k=a([c[0] for c in cands]), cand_t=a([c[1] for c in cands]),
        in_k=a([r[0] for r in in_rows]), in_v=a([r[1] for r in in_rows]), in_o=a([order[r[1]] for r in in_rows]),
        in_t=t(in_rows), in_d=a([r[3] for r in in_rows]),
        out_k=a([r[0] for r in out_rows]), out_v=a([r[1] for r in out_rows]), out_t=t(out_rows),
        out_d=a([r[3] for r in out_rows]),
    )


def run_points(fn, c, inner, mode, k):
    return fn(c["keys"], c["cand_k"], c["cand_t"], c["in_k"], c["in_v"],
              c["in_v"] if mode in (kr.GROUPS, kr.TOTAL, kr.POSITIVE) else c["in_o"], c["in_t"], c["in_d"],
              c["out_k"], c["out_t"], inner, mode, k)


def check_round(r, mode, k):
    depth, inner, keys, cands, in_rows, out_rows, order = r
    c = columns(depth, keys, cands, in_rows, out_rows, order)
    got = run_points(kr.reduce_points, c, inner, mode, k)
    want = run_points(kr.reduce_points_reference, c, inner, mode, k)
    if got[8] == kr.VALUE_OVERFLOW and want[8] == kr.OK:  # a partial sum left int64: the caller sums exactly
        return
    assert got[8] == want[8], "status"
    assert got[9] == want[9], "the first point that overflows"
    for i, name in enumerate(["first", "pk", "pa"]):
        assert got[i].tolist() == want[i].tolist(), name
    pending = sorted(zip(got[6].tolist(), map(tuple, got[7].tolist())))
    assert sorted(set(pending)) == list(zip(want[6].tolist(), map(tuple, want[7].tolist()))), "pending"
    if got[8] != kr.OK:
        return
    assert list(zip(*[x.tolist() for x in got[3:6]])) == list(zip(*[x.tolist() for x in want[3:6]])), "triples"
    first, pk, pa, dp, dv, dc = got[:6]
    e = kd.reduce_emit(c["keys"], first, pk, pa, dp, dv, dc, c["out_k"], c["out_v"], c["out_t"], c["out_d"], inner)
    want_e = kd.reduce_emit_reference(c["keys"], first, pk, pa, dp, dv, dc, c["out_k"], c["out_v"], c["out_t"],
                                      c["out_d"], inner)
    if e[4] == kd.NO_NEGATION:  # only a diff of -2**63 cannot be negated
        assert MIN in [*c["out_d"].tolist(), *dc.tolist()]
        return
    if e[4] == kd.SUM_OVERFLOW:  # the terms of the last row sum outside int64
        key, v, t = int(e[0][-1]), int(e[1][-1]), int(e[2][-1][0])
        assert not MIN <= want_e.get((key, v, t), 0) <= MAX
        return
    assert all(MIN <= d <= MAX for d in want_e.values()), "a sum outside int64 not refused"
    assert e[2].shape == (len(e[0]), depth) and (e[2][:, 1:] == inner).all(), "times (outer, *inner)"
    rows = list(zip(e[0].tolist(), e[1].tolist(), e[2][:, 0].tolist()))
    assert rows == sorted(set(rows)), "consolidated: sorted by (key, out, time), distinct"
    assert dict(zip(rows, e[3].tolist())) == want_e


@pytest.mark.parametrize("mode", MODES)
def test_round_matches_reference(mode):
    @settings(max_examples=profiles.at_most(150), deadline=None)
    @given(rounds(), st.integers(1, 4))
    def check(r, k):
        check_round(r, mode, k)

    check()


@pytest.mark.parametrize("mode", MODES)
def test_round_overflow_statuses_match_reference(mode):
    @settings(max_examples=profiles.at_most(60), deadline=None)
    @given(rounds(extremes=True), st.integers(1, 4))
    def check(r, k):
        check_round(r, mode, k)

    check()


def test_empty_history_and_one_candidate():
    a = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    e2 = np.empty((0, 2), dtype=np.int64)
    out = kr.reduce_points(a([7]), a([7]), a([3]), a([]), a([]), a([]), e2, a([]), a([]), e2, a([0]), kr.TOTAL, 1)
    first, pk, pa, dp, dv, dc, pend_k, pend_t, status, at = out
    assert (first.tolist(), pk.tolist(), pa.tolist(), dp.tolist(), status, at) == ([3], [0], [3], [], kr.OK, -1)
    assert pend_t.shape == (0, 2)


def test_extremes_of_one_key_all_equal_rows():
    """Many equal rows: the count is their sum, and one more pushes it past int64."""
    a = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    n = 10
    t = np.zeros((n, 1), dtype=np.int64)
    got = kr.reduce_points(a([1]), a([1]), a([0]), a([1] * n), a([5] * n), a([5] * n), t, a([2] * n), a([]),
                           np.empty((0, 1), dtype=np.int64), a([]), kr.TOTAL, 1)
    assert got[4].tolist() == [2 * n] and got[8] == kr.OK
    got = kr.reduce_points(a([1]), a([1]), a([0]), a([1, 1]), a([5, 5]), a([5, 5]), t[:2], a([MAX, 1]), a([]),
                           np.empty((0, 1), dtype=np.int64), a([]), kr.TOTAL, 1)
    assert got[8] == kr.DIFF_OVERFLOW and got[9] == 0


@st.composite
def long_runs(draw):
    """Rounds of one or two keys with well over 64 history rows each: a key's rows and points are
    sorted by the longer-run path of the kernel."""
    depth = draw(st.integers(1, 3))
    inner = np.array(draw(st.lists(st.integers(0, 3), min_size=depth - 1, max_size=depth - 1)), dtype=np.int64)
    keys = sorted(draw(st.lists(st.integers(0, 9), min_size=1, max_size=2, unique=True)))
    cands = [(k, draw(st.integers(0, 40))) for k in keys]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_in, n_out = draw(st.integers(65, 200)), draw(st.integers(0, 100))

    def rows(n):
        return [(keys[int(rng.integers(len(keys)))], int(rng.integers(6)),
                 (int(rng.integers(60)), *(int(x) for x in rng.integers(0, 5, depth - 1))),
                 int(rng.choice([-2, -1, 1, 2]))) for _ in range(n)]

    order = dict(zip(range(6), draw(st.permutations([-7, 0, 3, 10**17, -(10**18), MAX // 3]))))
    return depth, inner, keys, cands, rows(n_in), rows(n_out), order


@pytest.mark.parametrize("mode", MODES)
def test_long_key_runs_match_reference(mode):
    @settings(max_examples=profiles.at_most(15), deadline=None)
    @given(long_runs(), st.integers(1, 4))
    def check(r, k):
        check_round(r, mode, k)

    check()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=80, unique=True),
       st.lists(st.integers(0, 400), min_size=1, max_size=80, unique=True),
       st.sampled_from(["extremes", "dense"]), st.integers(0, 300), st.randoms(use_true_random=False))
def test_key_indices_find_every_id_by_table_or_by_search(extreme, dense, which, n, rnd):
    """Each id's index among the sorted distinct keys, whether found through a table over the keys'
    range (dense ids, enough rows) or by searching (negative or far-apart keys, few rows)."""
    from ddflow.operators.kernels.reduce.points import _key_indices

    keys = np.array(sorted(extreme if which == "extremes" else dense), dtype=np.int64)
    ids = np.array([rnd.choice(keys.tolist()) for _ in range(n)], dtype=np.int64)
    assert np.array_equal(_key_indices(keys, ids), np.searchsorted(keys, ids))
