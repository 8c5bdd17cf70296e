"""Maps that do arithmetic with an int constant (``lambda v: (v[0], v[1] + 1)``, ``lambda n: n % 100``)
are computed on id columns where the values are plain ints and Python's result fits int64; every other
record gets the Python call. Either way the results are Python's: checked here against the function
applied record by record, at every time, with retractions and negative multiplicities, on both
executors and both ways of giving an input (tuples one by one, int columns)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.errors import UserFunctionError
from ddflow.operators.nodes import linear
from ddflow.operators.nodes.records import shape_of
from ddflow.operators.tuning import EngineConfig
from support.calls import records_called

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

FUNCTIONS = {
    "next": lambda r: (r[0], r[1] + 1),
    "bucket": lambda r: r[1] % 7,
    "negative bucket": lambda r: (r[0] % -3, r[1]),
    "scaled": lambda r: r[0] * 3 - 2,
    "halved": lambda r: (r[1] - 9, r[0] // -3),
    "swap and shift": lambda r: (r[-1] * -1, 5 - r[-2]),
    "nested": lambda r: ((r[0] + 1) * 2) // 5,
    "sum": lambda r: r[0] + r[1],
    "product": lambda r: (r[1] * r[0], r[0] - r[-1]),
}
DIVIDING = {  # divided by a record's field: records with a zero field left out
    "into": lambda r: 100 // r[1],
    "remainder of": lambda r: -5 % r[0],
    "ratio": lambda r: (r[0] // r[1], r[1] % r[0]),
}

extreme_ints = st.sampled_from([0, 1, -1, 2, I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1, 2**62, -(2**62), 3 * 2**61])
int64s = st.one_of(st.integers(-50, 50), extreme_ints, st.integers(I64_MIN, I64_MAX))
values = st.one_of(int64s, st.integers(-(2**70), 2**70), st.floats(-1e6, 1e6, allow_nan=False), st.booleans())
Point = namedtuple("Point", "x y")


def _run(functions, updates, executor, columns):
    df = Dataflow(config=EngineConfig(executor=executor))
    data = df.new_input("data")
    caps = {name: data.collection.map(f).capture() for name, f in functions.items()}
    if columns:
        records = np.array([r for r, _t, _d in updates], dtype=np.int64)
        data.update_many(records, np.array([t for _r, t, _d in updates]), np.array([d for _r, _t, d in updates]))
    else:
        for record, time, diff in updates:
            data.update(record, time, diff)
    data.advance_to(10)
    df.run()
    return caps


def _expected(f, updates, t):
    totals: dict = {}
    for record, time, diff in updates:
        if time <= t:
            out = f(record)
            totals[out] = totals.get(out, 0) + diff
    return {k: v for k, v in totals.items() if v}


def _updates(fields, others=False):
    """Updates of pairs of ``fields``; with ``others`` also 3-tuples and named pairs (not plain
    2-tuples: their items are read in Python)."""
    records = st.tuples(fields, fields)
    if others:
        records = st.one_of(records, st.tuples(fields, fields, fields), st.builds(Point, fields, fields))
    return st.lists(st.tuples(records, st.integers(0, 9), st.sampled_from([-2, -1, 1, 3])), min_size=1, max_size=40)


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=40, deadline=None)
@given(updates=_updates(values, others=True))
def test_arithmetic_maps_give_pythons_results(executor, updates):
    caps = _run(FUNCTIONS, updates, executor, columns=False)
    for name, f in FUNCTIONS.items():
        for t in range(10):
            assert caps[name].at(t) == _expected(f, updates, t), name


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=40, deadline=None)
@given(updates=_updates(int64s))
def test_arithmetic_maps_over_int_columns_give_pythons_results(executor, updates):
    """Records given as two int64 columns reach the maps as pair columns: computed from them, or
    (a result beyond int64) mapped by their ids through the Python call."""
    caps = _run(FUNCTIONS, updates, executor, columns=True)
    for name, f in FUNCTIONS.items():
        for t in range(10):
            assert caps[name].at(t) == _expected(f, updates, t), name


@settings(max_examples=40, deadline=None)
@given(updates=_updates(int64s.filter(lambda x: x != 0)))
def test_a_constant_divided_by_a_field_gives_pythons_results(updates):
    caps = _run(DIVIDING, updates, "plan", columns=True)
    for name, f in DIVIDING.items():
        for t in range(10):
            assert caps[name].at(t) == _expected(f, updates, t), name


def test_plain_ints_need_no_python_call_and_other_values_do(monkeypatch):
    calls = records_called(monkeypatch, linear.Map, "_call")
    df = Dataflow()
    data = df.new_input("data")
    out = data.collection.map(lambda r: (r[0], r[1] + 1)).capture()
    for i, record in enumerate([(1, 2), (3, 4), (5, I64_MAX - 1)]):
        data.insert(record, i)
    data.advance_to(3)
    df.run()
    assert calls[0] == 0
    assert out.at(2) == {(1, 3): 1, (3, 5): 1, (5, I64_MAX): 1}
    for i, record in enumerate([(6, I64_MAX), (7, 2.5), (8, 2**80)]):  # a result beyond int64, not ints
        data.insert(record, 3 + i)
    data.advance_to(6)
    df.run()
    assert calls[0] == 3
    assert out.at(5) == {(1, 3): 1, (3, 5): 1, (5, I64_MAX): 1, (6, 2**63): 1, (7, 3.5): 1, (8, 2**80 + 1): 1}


def test_a_division_by_a_zero_field_raises_as_python_does():
    """The error names the whole record: a map that may call Python is given both fields of an input
    of two columns, though its arithmetic reads one."""
    df = Dataflow()
    data = df.new_input("data")
    data.collection.map(lambda r: 100 // r[1]).capture()
    data.update_many(np.array([[1, 5], [2, 0]]), np.array([0, 1]), np.array([1, 1]))
    data.advance_to(2)
    with pytest.raises(UserFunctionError, match=r"ZeroDivisionError.*\(2, 0\)"):
        df.run()


@pytest.mark.parametrize("f, recognised", [
    (lambda r: r + 1, True),
    (lambda r: 3 * r[0], True),
    (lambda r: (r[0] % 10, r[1] // 2), True),
    (lambda r: r - True, False),  # a bool constant: not an int constant
    (lambda r: r + 1.5, False),
    (lambda r: r ** 2, False),
    (lambda r: r / 2, False),
    (lambda r: r[0] + r[1], True),  # two values
    (lambda r: r[0] + "a", False),  # a str constant
    (lambda r: (r[0], r[1]) + 1, False),  # a tuple's arithmetic
    (lambda r: 1 + 2, True),  # folded to a constant by the compiler
])
def test_the_shapes_of_arithmetic_maps(f, recognised):
    assert (shape_of(f, 1, items=True) is not None) == recognised


def test_joins_build_no_arithmetic():
    """A join's record builder reads no arithmetic (it has no Python call to fall back on)."""
    assert shape_of(lambda k, a, b: (k, a + 1)) is None
