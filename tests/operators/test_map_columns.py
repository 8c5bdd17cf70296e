"""``map`` functions that only rearrange a record (its items, itself, constants, 2-tuples of those)
are recognised from their bytecode and built from id columns for records that are plain 2-tuples,
giving the ids their Python results would get; every other record, and every other function, gets
the Python call."""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.errors import UserFunctionError
from ddflow.operators.nodes.linear import Map
from ddflow.operators.nodes.records import shape_of


def _swap(pair):
    return pair[1], pair[0]


@pytest.mark.parametrize("f, shape", [
    (_swap, ("tuple", [("item", 0, 1), ("item", 0, 0)])),
    (lambda root: (root, root), ("tuple", [("arg", 0), ("arg", 0)])),
    (lambda e: (e[-1], (e[0], "x")), ("tuple", [("item", 0, 1), ("tuple", [("item", 0, 0), ("const", "x")])])),
    (lambda e: e[0], ("item", 0, 0)),
    (lambda e: e, ("arg", 0)),
    (lambda e: e[0] + 1, ("arith", "+", ("item", 0, 0), ("const", 1))),  # arithmetic with an int constant
])
def test_shape_of_rearranging_maps(f, shape):
    assert shape_of(f, 1, items=True) == shape


@pytest.mark.parametrize("f", [
    lambda e: e[2],  # not an item of a pair
    lambda e: e[0][1],  # an item of an item: the first item need not be a pair
    lambda e: (e[0], e[1], e[0]),  # a 3-tuple
    lambda e: e[1:],
    lambda e: e[0] + 1.5,  # arithmetic with a float
    lambda e, k=1: (e[k], e[0]),
])
def test_other_maps_have_no_shape(f):
    assert shape_of(f, 1, items=True) is None


Point = namedtuple("Point", "x y")

scalars = st.one_of(st.integers(-5, 5), st.text(max_size=2), st.none(), st.booleans())
records = st.one_of(
    scalars,
    st.tuples(scalars, scalars),
    st.tuples(st.tuples(scalars, scalars), scalars),
    st.tuples(scalars, scalars, scalars),
    st.builds(Point, scalars, scalars),
)
FUNCTIONS = [_swap, lambda e: (e, e), lambda e: (e[1], (e[0], 7)), lambda e: e[-2], lambda e: (e, "c")]


def _python(f, record):
    try:
        return ("ok", f(record))
    except Exception as exc:  # an item of a value without items
        return ("raise", type(exc))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(records, st.integers(1, 3), st.sampled_from([1, -1, 2])), max_size=25),
       st.sampled_from(range(len(FUNCTIONS))))
def test_a_rearranging_map_equals_python_on_every_record(updates, which):
    f = FUNCTIONS[which]
    results = [_python(f, r) for r, _, _ in updates]
    df = Dataflow()
    inp = df.new_input("x")
    probe = inp.collection.map(f).capture()
    for r, t, d in updates:
        inp.update(r, t, d)
    inp.advance_to(10)
    if any(kind == "raise" for kind, _ in results):
        with pytest.raises(Exception):  # noqa: B017 (the same error the Python call raises)
            df.run()
        return
    df.run()
    want: dict = {}
    for (_, out), (_, t, d) in zip(results, updates):
        for at in range(t, 10):
            if at == 9:
                want[out] = want.get(out, 0) + d
    want = {k: v for k, v in want.items() if v}
    got = probe.at(9)
    assert got == want


def test_plain_pairs_call_no_python_and_other_records_do(monkeypatch):
    calls = []
    original = Map._call

    def counting(self, ids):
        calls.append(len(ids))
        return original(self, ids)

    monkeypatch.setattr(Map, "_call", counting)
    df = Dataflow()
    inp = df.new_input("x")
    probe = inp.collection.map(_swap).capture()
    for i in range(100):
        inp.insert((i, -i), 1)
    inp.advance_to(2)
    df.run()
    assert calls == [] and probe.at(1) == {(-i, i): 1 for i in range(100)}
    inp.insert(Point(1, 2), 2)  # tuple subclasses (kept as objects): Python calls
    inp.insert(Point(3, 4), 2)
    inp.insert(5, 2)
    inp.advance_to(3)
    with pytest.raises(UserFunctionError) as raised:  # 5[1]: the Python call's own error, named
        df.run()
    assert isinstance(raised.value.__cause__, TypeError) and raised.value.operator == "map"
    assert calls == [3]
