"""Join record builders: a function that only pairs its arguments (and constants) is recognised
from its bytecode and built from id columns, giving the ids its Python result would get; anything
else goes through the memoized Python builder."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.library import reachability
from ddflow.operators.nodes.join import Join
from ddflow.operators.nodes.records import PairBuilder, PythonBuilder, record_builder, shape_of


@pytest.mark.parametrize("f, shape", [
    (lambda key, v1, v2: (key, (v1, v2)), ("tuple", [("arg", 0), ("tuple", [("arg", 1), ("arg", 2)])])),
    (lambda _node, root, dst: (dst, root), ("tuple", [("arg", 2), ("arg", 1)])),
    (lambda k, a, b: (b, (a, "x")), ("tuple", [("arg", 2), ("tuple", [("arg", 1), ("const", "x")])])),
    (lambda k, a, b: a, ("arg", 1)),
])
def test_shape_of_pairing_functions(f, shape):
    assert shape_of(f) == shape


y = 3


def named(k, a, b):
    z = (a, b)
    return z


@pytest.mark.parametrize("f", [
    lambda k, a, b: (b, a) if a else None,  # inspects a value
    lambda k, a, b: (k, a, b),  # a 3-tuple is not a pair
    lambda k, a, b: (k, y),  # a global could change
    lambda k, a, b: (k, str(a)),
    named,  # a local variable
    lambda k, *rest: (k, rest),
    max,
])
def test_shape_of_refuses_anything_else(f):
    assert shape_of(f) is None


def test_pair_builder_gives_the_ids_of_the_python_records():
    df = Dataflow()
    interner = df.interner
    values = [1, -2, "s", (3, 4), None, 2.5, True, ("t", (1,))]
    keys = interner.ids([values[i % len(values)] for i in range(40)])
    a = interner.ids([values[(i * 3) % len(values)] for i in range(40)])
    b = interner.ids([values[(i * 5 + 1) % len(values)] for i in range(40)])
    for f in (lambda k, x, z: (k, (x, z)), lambda k, x, z: (z, x), lambda k, x, z: ((z, "c"), (k, (1, 2)))):
        fast = record_builder(interner, f)
        assert isinstance(fast, PairBuilder)
        slow = PythonBuilder(interner, f)
        assert fast(keys, a, b).tolist() == slow(keys, a, b).tolist()
        assert interner.value_list(fast(keys, a, b)) == [f(*r) for r in zip(*(interner.value_list(c)
                                                                             for c in (keys, a, b)))]


def test_library_joins_build_records_from_id_columns():
    df = Dataflow()
    roots, edges = df.new_input("roots"), df.new_input("edges")
    reachability(roots.collection, edges.collection)
    joined = roots.collection.map(lambda r: (r, r)).join(edges.collection)
    semi = edges.collection.semijoin(roots.collection)
    assert joined is not None and semi is not None
    joins = [n for n in df._all_nodes() if isinstance(n, Join)]
    assert len(joins) == 3 and all(isinstance(n.output, PairBuilder) for n in joins)
