"""The kept-history kernels against their references: any sequence of stores (runs condensed and
replaced, the arena growing and collecting its garbage) reads back as the dict of runs says, each
kept key's run followed by its new rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from support import profiles

from ddflow.operators.kernels.reduce.history import (history_gather, history_gather_reference, history_store,
                                                     history_store_reference)

DEPTH = 2
BIG = 1 << 62
diffs = st.one_of(st.integers(-3, 3), st.sampled_from([BIG, -BIG]))
row = st.tuples(st.integers(0, 7), st.integers(-2, 2), st.integers(0, 3), st.integers(0, 3), diffs)
store = st.tuples(st.lists(row, max_size=12), st.sets(st.integers(0, 7), max_size=4), st.tuples(
    st.integers(0, 3), st.integers(0, 3)))


def _columns(rows):
    c = lambda i: np.array([r[i] for r in rows], np.int64)  # noqa: E731
    return c(0), c(1), np.array([r[2:4] for r in rows], np.int64).reshape(len(rows), DEPTH), c(4)


# one key's run longer than the kernel's insertion sort handles (32 rows): sorted by the merge sort
long_store = st.tuples(st.lists(st.tuples(st.just(0), st.integers(-2, 2), st.integers(0, 3), st.integers(0, 3), diffs),
                                min_size=33, max_size=120), st.sets(st.integers(0, 7), max_size=2),
                       st.tuples(st.integers(0, 3), st.integers(0, 3)))


@settings(max_examples=300, deadline=None)
@given(st.lists(store, min_size=1, max_size=8), st.integers(0, 20), st.lists(row, max_size=6))
def test_stores_read_back_as_the_reference(stores, capacity, new):
    check(stores, capacity, new)


@settings(max_examples=profiles.at_most(40), deadline=None)
@given(st.lists(st.one_of(long_store, store), min_size=1, max_size=3), st.integers(0, 20), st.lists(row, max_size=6))
def test_long_runs_read_back_as_the_reference(stores, capacity, new):
    check(stores, capacity, new)


def check(stores, capacity, new):
    start, length = np.zeros(8, np.int64), np.zeros(8, np.int64)
    av, at, ad = np.empty(capacity, np.int64), np.empty((capacity, DEPTH), np.int64), np.empty(capacity, np.int64)
    used = 0
    runs: dict = {}
    keys_all = np.arange(8, dtype=np.int64)
    for rows, empty_keys, g in stores:
        keys = np.array(sorted({r[0] for r in rows} | empty_keys), np.int64)
        entries = keys.copy()  # entry e holds key e
        rk, v, t, d = _columns(rows)
        g = np.array(g, np.int64)
        av, at, ad, used, ok = history_store(keys, entries, rk, v, t, d, g, start, length, 8, av, at, ad, used)
        want_ok = history_store_reference(runs, keys, entries, rk, v, t, d, g)
        assert ok == want_ok
        if not ok:
            return
        assert used <= len(av) and length.sum() <= used
        entries = np.array([e if e in runs else -1 for e in range(8)], np.int64)
        fk, fv, ft, fd = _columns(new)
        k, gv, gt, gd, n_fresh = history_gather(keys_all, entries, start, length, av, at, ad, fk, fv, ft, fd)
        got = [(int(a), int(b), tuple(c.tolist()), int(x)) for a, b, c, x in zip(k, gv, gt, gd)]
        assert (got, n_fresh) == history_gather_reference(runs, keys_all, entries, fk, fv, ft, fd)
