"""The run of ints: a dense range of new ints interned by an offset instead of the ints' table.

Whatever the order of dense batches, scattered ints, objects equal to ints and reclaims, the ids must
be what the table alone would promise: equal ints (and objects equal to them) share one id, distinct
ones get distinct ids, an id gives its value back, and an id held through a reclaim keeps its value.
"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.values import ids as id_layout
from ddflow.operators.values.interner import Interner


@contextlib.contextmanager
def run_min(n: int):
    saved = id_layout.RUN_MIN
    id_layout.RUN_MIN = n
    try:
        yield
    finally:
        id_layout.RUN_MIN = saved


def _reclaim(interner: Interner, held: np.ndarray) -> int:
    marks = interner.marks()
    interner.mark(held, marks)
    return interner.reclaim(marks)


dense = st.builds(lambda lo, n, extra, seed: np.random.default_rng(seed).permutation(
                      np.concatenate([np.arange(lo, lo + n), np.arange(lo, lo + n)[:extra]])).tolist(),
                  st.integers(-40, 40), st.integers(0, 24), st.integers(0, 6), st.integers(0, 2**16))
scattered = st.lists(st.one_of(st.integers(-60, 60), st.integers(-(2**63), 2**63 - 1)), max_size=12)
aliases = st.lists(st.sampled_from([True, False, 1.0, 3.0, -2.0]), min_size=1, max_size=3)
steps = st.lists(st.one_of(st.tuples(st.just("ints"), dense), st.tuples(st.just("ints"), scattered),
                           st.tuples(st.just("objects"), aliases), st.tuples(st.just("reclaim"), st.integers(0, 2**16))),
                 max_size=8)


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans())
def test_runs_give_the_ids_the_table_would(script, as_column):
    with run_min(4):
        interner = Interner()
        by_value: dict = {}  # value -> id, with Python equality (True == 1 == 1.0)
        for kind, arg in script:
            if kind == "reclaim":
                rng = np.random.default_rng(arg)
                kept = {v: i for v, i in by_value.items() if rng.random() < 0.5}
                _reclaim(interner, np.array(sorted(set(kept.values())), dtype=np.int64))
                by_value = kept
                continue
            if kind == "ints" and as_column and all(-(2**63) <= v < 2**63 for v in arg):
                got = interner.int_ids(np.array(arg, dtype=np.int64)).tolist()
            else:
                got = interner.ids(arg).tolist()
            for v, i in zip(arg, got):
                if v in by_value:
                    assert by_value[v] == i, (v, by_value[v], i)
                else:
                    assert i not in by_value.values(), (v, i)
                    by_value[v] = i
                back = interner.value(i)
                assert back == v and type(back) is type(next(k for k in by_value if k == v))
        if by_value:
            ids = np.array(list(by_value.values()), dtype=np.int64)
            assert interner.value_list(ids) == list(by_value)


def test_a_dense_column_takes_consecutive_ids_without_the_table_until_one_is_given_back():
    interner = Interner()
    interner.id("pinned")
    column = np.random.default_rng(1).permutation(np.arange(-5_000, 5_000))
    got = interner.int_ids(column)
    assert (got == column + 5_001).all()  # the run starts after the pinned id, in the range's order
    assert interner.stats()["int_capacity"] == 16  # nothing went into the ints' table
    assert interner.int_ids(np.array([-5_000, 4_999, 7_000])).tolist() == [1, 10_000, 10_001]
    assert interner.ids([True, 2.0]).tolist() == [5_002, 5_003] and interner.value(5_002) == 1
    held = got[got != 5_001]  # the int 0 is given back: the run ends, the others enter the table
    _reclaim(interner, held)
    assert interner.stats()["int_capacity"] >= 9_999
    assert (interner.int_ids(column[column != 0]) == column[column != 0] + 5_001).all()
    assert interner.int_ids(np.array([0])).tolist() == [5_001]  # the lowest free id again
    # a range holding an int the table has already (7) starts no run
    other = interner.int_ids(np.arange(7, 7 + 5_000))
    assert other[0] == interner.int_ids(np.array([7]))[0] and len(set(other.tolist())) == 5_000
