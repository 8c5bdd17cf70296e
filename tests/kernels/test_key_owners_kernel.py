"""The compiled key_owners kernel: ``key_hash(value) % count`` of ids of ints and of pairs of two
ints in one pass, against its numpy reference on random id spaces (every kind, int64 extremes),
and through the interner against ``partition.key_hash`` of the Python values themselves."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels.columns import key_owners, key_owners_reference
from ddflow.operators.partition import key_hash
from ddflow.operators.values.interner import Interner

INT, PAIR, OBJ, OBJ_INT, OBJ_PAIR = 0, 1, 2, 3, 4
INTS, PAIRS = np.array([INT, OBJ_INT], dtype=np.int64), np.array([PAIR, OBJ_PAIR], dtype=np.int64)
EXTREMES = [0, -1, -2, 1, 2**61 - 2, 2**61 - 1, 2**61, -(2**61) + 1, -(2**61), 2**62, 2**63 - 1, -(2**63),
            -(2**63) + 1]
VALUES = st.one_of(st.integers(-5, 5), st.sampled_from(EXTREMES), st.integers(-(2**63), 2**63 - 1))


@st.composite
def id_spaces(draw):
    m = draw(st.integers(1, 30))
    kinds = np.array(draw(st.lists(st.sampled_from([INT, INT, PAIR, PAIR, OBJ, OBJ_INT, OBJ_PAIR]),
                                   min_size=m, max_size=m)), dtype=np.int8)
    payload = np.zeros(m, dtype=np.int64)
    for i in range(m):
        if kinds[i] in (PAIR, OBJ_PAIR):
            payload[i] = (draw(st.integers(0, m - 1)) << 32) | draw(st.integers(0, m - 1))
        else:
            payload[i] = draw(VALUES)
    ids = np.array(draw(st.lists(st.integers(0, m - 1), min_size=0, max_size=40)), dtype=np.int64)
    return ids, kinds, payload, draw(st.integers(1, 7))


@settings(max_examples=400, deadline=None)
@given(id_spaces())
def test_key_owners_agrees_with_reference(space):
    ids, kinds, payload, count = space
    owners, left = key_owners(ids, kinds, payload, INTS, PAIRS, count)
    want, want_left = key_owners_reference(ids, kinds, payload, INTS, PAIRS, count)
    assert owners.tolist() == want.tolist() and left == want_left


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(EXTREMES),
                          st.tuples(st.sampled_from(EXTREMES), st.integers(-(2**63), 2**63 - 1)),
                          st.tuples(st.integers(-3, 3), st.text(max_size=2)),
                          st.tuples(st.tuples(st.integers(0, 3), st.integers(0, 3)), st.integers(0, 3)),
                          st.booleans(), st.floats(allow_nan=False), st.text(max_size=2)),
                min_size=1, max_size=30), st.integers(1, 7))
def test_interner_owners_are_the_key_hash_of_the_values(values, count):
    """Every value's owner through the interner (compiled for ints and pairs of ints, element
    hashes for the rest) is ``key_hash(value) % count``."""
    interner = Interner()
    ids = interner.ids(values)
    assert interner.owners(ids, count).tolist() == [key_hash(v) % count for v in values]


def test_ints_and_pairs_of_ints_need_no_python():
    interner = Interner()
    values = [*range(-50, 50), 2**63 - 1, -(2**63), *[(i, -i) for i in range(50)], True]
    ids = interner.ids(values)
    space = interner._space
    owners, left = key_owners(ids, space.kinds, space.payload, INTS, PAIRS, 5)
    assert left == 0 and owners.tolist() == [key_hash(v) % 5 for v in values]
    strings = interner.ids(["a", ("a", 1), ((1, 2), 3)])
    assert key_owners(strings, space.kinds, space.payload, INTS, PAIRS, 5)[1] == 3  # left to Python
