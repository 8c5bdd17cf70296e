"""The compiled int_columns kernel against its reference: ids of ints, or of pairs of ints, read back
as int columns in one pass; any other kind, an int out of bounds or a mix answers width 0."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.columns import int_columns, int_columns_reference
from ddflow.operators.values.interner import Interner

INT, PAIR, OBJ = 0, 1, 2
BOUND = 1 << 62
VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([BOUND - 1, BOUND, -BOUND + 1, -BOUND, 2**63 - 1, -(2**63)]),
                   st.integers(-(2**63), 2**63 - 1))


@st.composite
def id_spaces(draw):
    m = draw(st.integers(1, 30))
    kinds = np.array(draw(st.lists(st.sampled_from([INT, INT, PAIR, OBJ]), min_size=m, max_size=m)), dtype=np.int8)
    payload = np.zeros(m, dtype=np.int64)
    for i in range(m):
        if kinds[i] == PAIR:
            payload[i] = (draw(st.integers(0, m - 1)) << 32) | draw(st.integers(0, m - 1))
        else:
            payload[i] = draw(VALUES)
    of = draw(st.sampled_from(["any", INT, PAIR]))  # mostly ids of one kind, so both widths come up
    pool = [i for i in range(m) if of == "any" or kinds[i] == of] or list(range(m))
    ids = np.array(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=40)), dtype=np.int64)
    return ids, kinds, payload


@settings(max_examples=400, deadline=None)
@given(id_spaces())
def test_int_columns_agrees_with_reference(space):
    ids, kinds, payload = space
    width, got = int_columns(ids, kinds, payload, INT, PAIR, BOUND)
    want_width, want = int_columns_reference(ids, kinds, payload, INT, PAIR, BOUND)
    assert width == want_width
    assert got.tolist() == want.tolist()
    assert got.shape == (len(ids) if width else 0, max(width, 1) if width == 1 else 2)


def test_the_bound_is_exclusive_on_both_sides():
    kinds = np.zeros(4, dtype=np.int8)
    payload = np.array([BOUND - 1, -BOUND + 1, BOUND, -BOUND], dtype=np.int64)
    assert int_columns(np.array([0, 1]), kinds, payload, INT, PAIR, BOUND)[0] == 1
    assert int_columns(np.array([0, 2]), kinds, payload, INT, PAIR, BOUND)[0] == 0
    assert int_columns(np.array([3]), kinds, payload, INT, PAIR, BOUND)[0] == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1),
                          st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
                          st.tuples(st.integers(-3, 3), st.text(max_size=2)), st.booleans(), st.text(max_size=2)),
                min_size=1, max_size=30))
def test_interner_int_columns_round_trips(values):
    """Through the interner: the columns it gives back are the values, and map back to the same ids;
    None exactly when some value is not a plain int (or pair of plain ints) of magnitude below 2**62."""
    interner = Interner()
    ids = interner.ids(values)
    columns = interner.int_columns(ids)
    values = interner.value_list(ids)  # equal values share an id, and its value is the first seen

    def small(v):
        return type(v) is int and -BOUND < v < BOUND

    if all(small(v) for v in values):
        assert columns is not None and columns.ndim == 1 and columns.tolist() == values
    elif all(type(v) is tuple and small(v[0]) and small(v[1]) for v in values):
        assert columns is not None and columns.shape == (len(values), 2)
        assert [tuple(r) for r in columns.tolist()] == values
    else:
        assert columns is None
        return
    assert interner.ids_of_columns(columns).tolist() == ids.tolist()


def test_interner_int_columns_of_nothing_is_an_empty_int_column():
    got = Interner().int_columns(np.empty(0, dtype=np.int64))
    assert got is not None and got.dtype == np.int64 and got.shape == (0,)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**62), 2**62), st.integers(1, 40), st.data())
def test_covers_range_agrees_with_reference(lo, span, data):
    """Columns of ints within ``lo .. lo + span - 1`` (repeats, gaps, every int or not) cover it or not."""
    from ddflow.operators.kernels.columns import covers_range, covers_range_reference

    offsets = data.draw(st.lists(st.integers(0, span - 1), min_size=1, max_size=3 * span))
    if data.draw(st.booleans()):
        offsets += list(range(span))  # every int at least once
    keys = np.array(data.draw(st.permutations(offsets)), dtype=np.int64) + np.int64(lo)
    assert covers_range(keys, lo, span) == covers_range_reference(keys, lo, span)


@settings(max_examples=100, deadline=None)
@given(st.integers(-(2**62), 2**62), st.integers(0, 40), st.integers(0, 5))
def test_fill_range_agrees_with_reference(lo, n, start):
    """The ints written into a slice of a longer column; the rest of it unchanged."""
    from ddflow.operators.kernels.columns import fill_range, fill_range_reference

    got, want = np.full(n + start + 3, 7, dtype=np.int64), np.full(n + start + 3, 7, dtype=np.int64)
    fill_range(got[start : start + n], lo)
    fill_range_reference(want[start : start + n], lo)
    assert np.array_equal(got, want)
