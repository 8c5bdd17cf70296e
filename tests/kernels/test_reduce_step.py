"""The one-call reduction round (points and output diffs in one kernel, for the modes whose desired
output is the kernel's triples) against its reference, the two reference kernels composed: output
diffs, times to revisit and overflow statuses, on random rounds of depth 1-3 with int64 extremes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import profiles
from test_reduce_kernel import MAX, MIN, columns, rounds

from ddflow.operators.kernels.reduce import diffs as kd
from ddflow.operators.kernels.reduce import step as ks


def check_step(r, mode, k):
    depth, inner, keys, cands, in_rows, out_rows, order = r
    c = columns(depth, keys, cands, in_rows, out_rows, order)
    in_o = c["in_v"] if mode == ks.POSITIVE else c["in_o"]
    args = (c["keys"], c["cand_k"], c["cand_t"], c["in_k"], c["in_v"], in_o, c["in_t"], c["in_d"], c["out_k"],
            c["out_v"], c["out_t"], c["out_d"], inner, mode, k)
    ek, eo, et, ed, pend_k, pend_t, status, emitted, bad_key, bad_outer = ks.reduce_step(*args)
    want, want_k, want_t, want_status, want_at = ks.reduce_step_reference(*args)
    assert status == want_status, "status"
    pending = sorted(set(zip(pend_k.tolist(), map(tuple, pend_t.tolist()))))
    assert pending == list(zip(want_k.tolist(), map(tuple, want_t.tolist()))), "pending"
    if status != ks.OK:
        assert (int(bad_key), int(bad_outer)) == want_at, "the first point that overflows"
        assert len(ek) == len(ed) == 0 and et.shape == (0, depth)
        return
    if emitted == kd.NO_NEGATION:  # only a diff of -2**63 cannot be negated
        assert MIN in c["out_d"].tolist()
        return
    if emitted == kd.SUM_OVERFLOW:  # the terms of the last row sum outside int64
        assert not MIN <= want.get((int(ek[-1]), int(eo[-1]), int(et[-1][0])), 0) <= MAX
        return
    assert emitted == kd.OK
    assert all(MIN <= d <= MAX for d in want.values()), "a sum outside int64 not refused"
    assert et.shape == (len(ek), depth) and (et[:, 1:] == inner).all(), "times (outer, *inner)"
    rows = list(zip(ek.tolist(), eo.tolist(), et[:, 0].tolist()))
    assert rows == sorted(set(rows)), "consolidated: sorted by (key, out, time), distinct"
    assert dict(zip(rows, ed.tolist())) == want


@pytest.mark.parametrize("mode", ks.FINISHED)
@pytest.mark.parametrize("extremes", [False, True])
def test_step_matches_the_two_references(mode, extremes):
    @settings(max_examples=profiles.at_most(100), deadline=None)
    @given(rounds(extremes=extremes), st.integers(1, 4))
    def check(r, k):
        check_step(r, mode, k)

    check()


def test_a_point_that_overflows_is_named():
    a = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    t = np.zeros((2, 1), dtype=np.int64)
    out = ks.reduce_step(a([1]), a([1]), a([4]), a([1, 1]), a([5, 5]), a([5, 5]), t, a([MAX, 1]), a([]), a([]),
                         np.empty((0, 1), np.int64), a([]), a([]), ks.POSITIVE, 9)
    assert out[6] == ks.DIFF_OVERFLOW and (int(out[8]), int(out[9])) == (1, 4)  # key 1 at its candidate's time
    assert len(out[0]) == 0


def batches(rows, depth, cuts):
    """``rows`` cut at ``cuts`` into consolidated tries (each sorted, one row per (key, val, time)),
    as a trie table and as the reference's flat columns."""
    from trie_strategies import Trie, table

    tries = []
    for part in np.array_split(np.arange(len(rows)), cuts) if rows else []:
        sums: dict = {}
        for i in part.tolist():
            key, val, time, diff = rows[i]
            sums[(key, val, tuple(time))] = sums.get((key, val, tuple(time)), 0) + diff
        kept = sorted((key, val, time, d) for (key, val, time), d in sums.items() if d and MIN <= d <= MAX)
        if kept:
            tries.append(Trie(kept, depth))
    return tries, table(tries), [t.cols for t in tries]


@settings(max_examples=profiles.at_most(100), deadline=None)
@given(rounds(extremes=True), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4))
def test_traced_step_reads_the_traces_as_the_references_do(r, in_cuts, out_cuts, k):
    """The round that looks its keys up in two traces itself: the reference lookups composed with the
    reference round, on histories cut into several batches (int64 extremes among the diffs)."""
    depth, inner, keys, cands, in_rows, out_rows, order = r
    c = columns(depth, keys, cands, in_rows, out_rows, order)
    in_tries, in_table, in_cols = batches(in_rows, depth, in_cuts)
    out_tries, out_table, out_cols = batches(out_rows, depth, out_cuts)
    got = ks.reduce_traced_step(c["keys"], c["cand_k"], c["cand_t"], in_table, out_table, inner, ks.POSITIVE, k)
    want, want_k, want_t, want_status, want_at, want_rows = ks.reduce_traced_step_reference(
        c["keys"], c["cand_k"], c["cand_t"], in_cols, out_cols, inner, ks.POSITIVE, k)
    out, n, m, status, emitted, bad_key, bad_outer, rows = got
    at = n * (3 + depth)
    assert out.shape == (at + m * (1 + depth),)
    ek, eo, ed, et = out[:n], out[n : 2 * n], out[2 * n : 3 * n], out[3 * n : at].reshape(n, depth)
    pend_k, pend_t = out[at : at + m], out[at + m :].reshape(m, depth)
    assert rows == want_rows, "history rows read"
    assert status == want_status, "status"
    pending = sorted(set(zip(pend_k.tolist(), map(tuple, pend_t.tolist()))))
    assert pending == list(zip(want_k.tolist(), map(tuple, want_t.tolist()))), "pending"
    if status != ks.OK:
        assert (int(bad_key), int(bad_outer)) == want_at, "the first point that overflows"
        return
    if emitted != kd.OK:  # a diff that cannot be negated or a sum outside int64 (see check_step)
        assert emitted in (kd.NO_NEGATION, kd.SUM_OVERFLOW)
        return
    rows_ = list(zip(ek.tolist(), eo.tolist(), et[:, 0].tolist()))
    assert rows_ == sorted(set(rows_)), "consolidated: sorted by (key, out, time), distinct"
    assert dict(zip(rows_, ed.tolist())) == want
    assert in_tries is not None and out_tries is not None  # the tries' buffers lived through the call
