"""Filters whose predicate compares records, items or arithmetic on them with each other or with an
int constant (``lambda r: r[1] > 5``, ``lambda r: r[0] < r[1]``) decide from id columns where the
values are plain ints; every other record gets the Python call. Either way the records kept are those Python keeps:
checked against the predicate applied record by record, at every time, with retractions and
negative multiplicities, on both executors."""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.errors import UserFunctionError
from ddflow.operators.nodes import linear
from ddflow.operators.nodes.records import PredicateBuilder, shape_of
from ddflow.operators.tuning import EngineConfig
from support.calls import records_called

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

PREDICATES = {
    "above": lambda r: r[1] > 5,
    "at least": lambda r: 3 <= r[0],
    "even": lambda r: r[0] % 2 == 0,
    "not eight": lambda r: r[1] * 2 != 8,
    "below after": lambda r: (r[0] + 1) < -3,
    "at most": lambda r: r[-1] <= I64_MIN + 1,
    "equal": lambda r: r[-2] == I64_MAX,
    "ordered": lambda r: r[0] < r[1],
    "sums": lambda r: r[0] + 1 >= r[1] * 2,
}
Point = namedtuple("Point", "x y")

ints = st.one_of(st.integers(-10, 10), st.sampled_from([I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1, 2**62]),
                 st.integers(I64_MIN, I64_MAX))
values = st.one_of(ints, st.integers(-(2**70), 2**70), st.floats(-1e6, 1e6, allow_nan=False), st.booleans())


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.tuples(values, values), st.tuples(values, values, values),
                                    st.builds(Point, values, values)),
                          st.integers(0, 9), st.sampled_from([-2, -1, 1, 3])),
                min_size=1, max_size=40))
def test_compared_filters_keep_what_python_keeps(executor, updates):
    df = Dataflow(config=EngineConfig(executor=executor))
    data = df.new_input("data")
    caps = {name: data.collection.filter(p).capture() for name, p in PREDICATES.items()}
    for record, time, diff in updates:
        data.update(record, time, diff)
    data.advance_to(10)
    df.run()
    for name, p in PREDICATES.items():
        for t in range(10):
            totals: dict = {}
            for record, time, diff in updates:
                if time <= t and p(record):
                    totals[record] = totals.get(record, 0) + diff
            assert caps[name].at(t) == {k: v for k, v in totals.items() if v}, name


def test_plain_ints_need_no_python_call_and_other_values_do(monkeypatch):
    calls = records_called(monkeypatch, linear.Filter, "_chunk")
    df = Dataflow()
    data = df.new_input("data")
    out = data.collection.filter(lambda n: n % 3 == 1).capture()
    for i, value in enumerate([1, 2, 4, 7, 1.0, 2.5, 2**70 + 1]):
        data.insert(value, i)
    data.advance_to(8)
    df.run()
    assert calls[0] == 2  # 2.5 and 2**70 + 1 (1.0 is the int 1's id: equal values share ids)
    assert out.at(7) == {1: 2, 4: 1, 7: 1}  # (2**70 + 1) % 3 == 2


def test_a_predicate_that_python_cannot_evaluate_raises_as_before():
    df = Dataflow()
    data = df.new_input("data")
    data.collection.filter(lambda r: r[1] > 5).capture()
    data.insert((1, "a"), 0)
    data.advance_to(1)
    with pytest.raises(UserFunctionError, match=r"TypeError.*\(1, 'a'\)"):
        df.run()


@pytest.mark.parametrize("p, recognised", [
    (lambda r: r > 1, True),
    (lambda r: r[0] % 2 == 0, True),
    (lambda r: 5 != r[-1], True),
    (lambda r: r > 1.5, False),
    (lambda r: r > 2**70, False),  # a constant beyond int64
    (lambda r: r[0] > r[1], True),
    (lambda r: r[0] > "a", False),
    (lambda r: 1 < r < 5, False),  # chained: jumps
    (lambda r: r is None, False),
    (lambda r: r in (1, 2), False),
    (lambda r: (r > 1) + 1, False),
])
def test_the_shapes_of_compared_predicates(p, recognised):
    shape = shape_of(p, 1, items=True, compare=True)
    assert (shape is not None and shape[0] == "compare") == recognised
    assert (PredicateBuilder(Dataflow().interner, p).shape is not None) == recognised


def test_maps_build_no_comparisons():
    """A map's output is built as ids of values: a comparison's bool is left to Python."""
    assert shape_of(lambda r: r > 1, 1, items=True) is None
