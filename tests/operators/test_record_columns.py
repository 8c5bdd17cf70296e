"""Records fed field by field (`RecordColumns`) are the records the tuples themselves are.

`InputSession.update_many` takes `RecordColumns` (an int array or a list of values per field) and
interns them column by column (`Interner.record_ids`): a record of two fields as the pair of its
columns' ids, other widths as tuples built in bulk. Against the same updates given as tuples, on
one dataflow: the same collection at every time, and the same ids from one interner.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.errors import ShapeError
from ddflow.operators.input import RecordColumns
from ddflow.operators.values.interner import Interner

# values that may equal one another across types (1, 1.0, True) or be tuples (pairs included)
VALUES = st.one_of(st.integers(-3, 3), st.sampled_from([1.0, 0.5, True, False, "a", "b", b"a", None, (1, 2), (1,)]),
                   st.text(max_size=2))


@st.composite
def records(draw):
    width = draw(st.integers(1, 3))
    n = draw(st.integers(0, 12))
    columns = []
    for _ in range(width):
        if draw(st.booleans()):
            columns.append(np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)),
                                    dtype=np.int64))
        else:
            columns.append(draw(st.lists(VALUES, min_size=n, max_size=n)))
    return columns


def as_tuples(columns) -> list[tuple]:
    return list(zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in columns)))


@settings(max_examples=150, deadline=None)
@given(records(), st.data())
def test_record_columns_are_the_tuples(columns, data):
    n = len(columns[0])
    times = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    diffs = data.draw(st.lists(st.sampled_from([1, -1, 2]), min_size=n, max_size=n))
    df = Dataflow()
    by_columns, by_tuples = df.new_input("columns"), df.new_input("tuples")
    got = by_columns.collection.map(lambda r: (type(r).__name__, r)).capture()
    want = by_tuples.collection.map(lambda r: (type(r).__name__, r)).capture()
    by_columns.update_many(RecordColumns(columns), times, diffs)
    by_tuples.update_many(as_tuples(columns), times, diffs)
    by_columns.close()
    by_tuples.close()
    df.run()
    for t in range(4):
        assert got.at(t) == want.at(t)


@settings(max_examples=150, deadline=None)
@given(records(), st.data())
def test_record_ids_are_the_ids_of_the_tuples(columns, data):
    """Interned in either order, after the same values, the ids agree."""
    seen = data.draw(st.lists(VALUES, max_size=5))
    first, second = Interner(), Interner()
    first.ids(seen)
    second.ids(seen)
    got = first.record_ids(columns)
    want = second.ids(as_tuples(columns))
    assert got.tolist() == want.tolist()
    assert first.value_list(got) == second.value_list(want)
    assert [type(v) for v in first.value_list(got)] == [type(v) for v in as_tuples(columns)]


def test_columns_join_and_select():
    a = RecordColumns([np.array([1, 2]), ["x", "y"]])
    b = RecordColumns([[3], ["z"]])
    joined = RecordColumns.concat([a, b])
    assert joined.tuples() == [(1, "x"), (2, "y"), (3, "z")]
    assert joined.take(np.array([2, 0])).tuples() == [(3, "z"), (1, "x")]
    assert joined.take(np.array([False, True, True])).tuples() == [(2, "y"), (3, "z")]
    assert joined.slice(1, 2).tuples() == [(2, "y")] and joined.record(0) == (1, "x")
    assert RecordColumns.concat([a, a]).columns[0].dtype == np.int64  # arrays stay arrays


def test_bad_columns_are_named():
    with pytest.raises(ShapeError, match="one length"):
        RecordColumns([[1, 2], [3]])
    with pytest.raises(ShapeError, match="at least one field"):
        RecordColumns([])
    with pytest.raises(ShapeError, match="integers"):
        RecordColumns([np.array([1.5])])
    with pytest.raises(ShapeError, match="not hashable"):
        Interner().record_ids([[[1]], ["a"]])
    df = Dataflow()
    recs = df.new_input("recs")
    with pytest.raises(Exception, match=r"record \('b', 2\)"):
        recs.update_many(RecordColumns([["a", "b"], np.array([1, 2])]), [0, 0], [1, 0])


@pytest.mark.parametrize("before", ["nothing", "an insert"])
def test_update_many_keeps_what_it_was_given_when_the_caller_reuses_its_arrays(before):
    """An int column is interned when it is given (or copied when an earlier update waits): the
    caller's arrays may change at once; a sweep before the run gives none of the chunk's ids back."""
    from ddflow.operators.tuning import EngineConfig
    from ddflow.operators.values import sweep

    df = Dataflow(config=EngineConfig(sweep_growth=1, sweep_min_ids=1))
    recs = df.new_input("recs")
    probe = recs.collection.capture()
    df.run()
    if before == "an insert":
        recs.insert(-1, 0)
    records, times, diffs = np.arange(5000, dtype=np.int64), np.zeros(5000, dtype=np.int64), np.ones(5000, dtype=np.int64)
    recs.update_many(records, times, diffs)
    records[:] = 7
    times[:] = 3
    diffs[:] = 2
    sweep.sweep(df.interner, df._all_nodes())  # the input holds its chunk's ids: none given back
    assert df.interner.reclaimed == 0
    recs.advance_to(1)
    df.run()
    want = {r: 1 for r in range(5000)} | ({-1: 1} if before == "an insert" else {})
    assert probe.at(0) == want
