"""The issue-3 public API block, run as written, and the precise exception for each kind of misuse."""

from __future__ import annotations

import re
from collections import Counter

import pytest


def test_api_block_exactly_as_written():
    record, time, diff = ("a", "b"), 1_700_000_000_000_000_123, 3

    from ddflow.operators import Dataflow
    df = Dataflow()
    edges = df.new_input("edges")          # an input session
    coll = edges.collection                # a Collection
    edges.insert(record, time)             # diff +1; time is an int (ns)
    edges.remove(record, time)             # diff -1
    edges.update(record, time, diff)       # any non-zero int diff
    edges.advance_to(time)                 # promise: no later update has a time < `time`
    edges.close()
    probe = coll.capture()                 # a Capture
    df.run()                               # do all work the input frontiers allow, then return
    probe.at(time)                         # dict record -> multiplicity accumulated at `time` (a complete time)
    probe.frontier                         # the output frontier (list of times)
    probe.updates                          # consolidated list of (record, time, diff)

    assert probe.at(time) == {record: 3}
    assert probe.at(time - 1) == {}
    assert probe.frontier == []
    assert probe.updates == [(record, time, 3)]


def test_api_block_with_distinct_values_per_line():
    from ddflow.operators import Dataflow

    df = Dataflow()
    edges = df.new_input("edges")
    coll = edges.collection
    early = coll.capture()  # a capture taken before any data, as well as one taken after
    edges.insert((1, 2), 10)
    edges.remove((1, 2), 20)
    edges.update((2, 3), 15, 3)
    edges.update((3, 4), 12, -2)
    edges.advance_to(18)
    probe = coll.capture()
    df.run()
    for capture in (early, probe):
        assert capture.frontier == [18]
        assert capture.at(9) == {}
        assert capture.at(12) == {(1, 2): 1, (3, 4): -2}
        assert capture.at(17) == {(1, 2): 1, (2, 3): 3, (3, 4): -2}
    edges.close()
    df.run()
    for capture in (early, probe):
        assert capture.frontier == []
        assert capture.at(20) == {(2, 3): 3, (3, 4): -2}
        assert Counter(capture.updates) == Counter(
            [((1, 2), 10, 1), ((3, 4), 12, -2), ((2, 3), 15, 3), ((1, 2), 20, -1)]
        )


def test_exceptions_are_exported_and_rooted():
    from ddflow import operators

    for name in ("TimeError", "DiffError", "ShapeError", "IncompleteTimeError"):
        assert issubclass(getattr(operators, name), operators.DataflowError), name


# -- misuse -----------------------------------------------------------------------------------


@pytest.fixture
def session():
    from ddflow.operators import Dataflow

    df = Dataflow()
    edges = df.new_input("edges")
    probe = edges.collection.capture()
    return df, edges, probe


@pytest.mark.parametrize("call", ["insert", "remove", "update"])
def test_update_behind_the_frontier(session, call):
    from ddflow.operators import TimeError

    df, edges, _ = session
    edges.advance_to(1_000)
    args = ((7, 8), 999) if call != "update" else ((7, 8), 999, 2)
    with pytest.raises(TimeError, match="999"):
        getattr(edges, call)(*args)
    edges.insert((7, 8), 1_000)  # at the frontier is fine


def test_advance_to_backwards(session):
    from ddflow.operators import TimeError

    df, edges, probe = session
    edges.advance_to(500)
    with pytest.raises(TimeError, match="499"):
        edges.advance_to(499)
    df.run()
    assert probe.frontier == [500]


@pytest.mark.parametrize("bad_time", [1.5, "10", None, 2**63, -(2**63) - 1])
def test_bad_time_value(session, bad_time):
    from ddflow.operators import TimeError

    _, edges, _ = session
    with pytest.raises(TimeError, match=re.escape(str(bad_time))):
        edges.update((1, 2), bad_time, 1)
    with pytest.raises(TimeError):
        edges.advance_to(bad_time)


@pytest.mark.parametrize("bad_diff", [0, 1.5, 1.0, "1", None])
def test_bad_diff(session, bad_diff):
    from ddflow.operators import DiffError

    _, edges, _ = session
    with pytest.raises(DiffError, match=re.escape(str(bad_diff))):
        edges.update((1, 2), 5, bad_diff)


KEYED = {
    "join": lambda c: c.join(c),
    "join_map": lambda c: c.join_map(c, lambda k, a, b: k),
    "semijoin": lambda c: c.semijoin(c.map(lambda r: 1)),
    "antijoin": lambda c: c.antijoin(c.map(lambda r: 1)),
    "reduce": lambda c: c.reduce(lambda k, vals: [(len(vals), 1)]),
    "min": lambda c: c.min(),
    "max": lambda c: c.max(),
    "sum": lambda c: c.sum(),
    "top_k": lambda c: c.top_k(2),
    "arrange_by_key": lambda c: c.arrange_by_key().collection,
}


@pytest.mark.parametrize("operator", sorted(KEYED))
@pytest.mark.parametrize("record", [5, (1, 2, 3), "ab"])
def test_wrong_shape_for_keyed_operator_raises_at_run(operator, record):
    from ddflow.operators import Dataflow, ShapeError

    df = Dataflow()
    edges = df.new_input("edges")
    KEYED[operator](edges.collection).capture()
    edges.insert(record, 3)  # accepted by the input: the shape matters only to the keyed operator
    edges.advance_to(4)
    with pytest.raises(ShapeError, match=re.escape(repr(record))):
        df.run()


def test_whole_record_operators_accept_any_shape():
    from ddflow.operators import Dataflow

    df = Dataflow()
    edges = df.new_input("edges")
    probes = [edges.collection.count().capture(), edges.collection.distinct().capture()]
    for record in (5, (1, 2, 3), "ab"):
        edges.insert(record, 3)
    edges.close()
    df.run()
    assert probes[0].at(3) == {(5, 1): 1, ((1, 2, 3), 1): 1, ("ab", 1): 1}
    assert probes[1].at(3) == {5: 1, (1, 2, 3): 1, "ab": 1}


def test_capture_at_an_incomplete_time(session):
    from ddflow.operators import IncompleteTimeError

    df, edges, probe = session
    edges.insert((1, 2), 5)
    edges.advance_to(10)
    df.run()
    assert probe.at(9) == {(1, 2): 1}
    for t in (10, 11, 10**18):
        with pytest.raises(IncompleteTimeError, match=str(t)):
            probe.at(t)
    edges.close()
    df.run()
    assert probe.at(10**18) == {(1, 2): 1}


def test_update_after_close(session):
    from ddflow.operators import DataflowError

    df, edges, _ = session
    edges.close()
    with pytest.raises(DataflowError, match="clos"):
        edges.insert((1, 2), 5)
    with pytest.raises(DataflowError, match="clos"):
        edges.advance_to(7)


def test_records_equal_in_python_are_one_record():
    """1 == 1.0 == True: updates to any of them change one record (and one join key)."""
    from ddflow.operators import Dataflow

    df = Dataflow()
    a, b = df.new_input("a"), df.new_input("b")
    counts = a.collection.count().capture()
    joined = a.collection.map(lambda r: (r, "a")).join(b.collection).capture()
    a.insert(1, 10)
    a.insert(1.0, 11)
    a.update(True, 12, 2)
    a.remove(1, 13)
    b.insert((True, "b"), 10)
    b.insert((1.0, "c"), 12)
    for session in (a, b):
        session.close()
    df.run()
    assert counts.at(10) == {(1, 1): 1}
    assert counts.at(12) == {(1, 4): 1}
    assert counts.at(13) == {(1, 3): 1}
    assert joined.at(11) == {(1, ("a", "b")): 2}
    assert joined.at(13) == {(1, ("a", "b")): 3, (1, ("a", "c")): 3}


def test_testing_helpers_drive_a_real_dataflow():
    """``ReplaySource`` + ``lockstep`` + ``run_until`` from ``ddflow.operators.testing``."""
    from ddflow.operators import Dataflow
    from ddflow.operators.testing import ReplayError, ReplaySource, lockstep, run_until

    df = Dataflow()
    edges = df.new_input("edges")
    probe = edges.collection.map(lambda e: e[0]).count().capture()
    source = ReplaySource(
        [((1, 2), 5, 1), ((1, 3), 15, 1), ((2, 3), 25, 1), ((1, 2), 35, -1)], [10, 20, 30], close=False
    )
    steps = lockstep([(edges, source)])
    assert run_until(df, probe, 22, steps) == {(1, 2): 1}
    assert probe.frontier == [30]  # it stopped as soon as 22 was complete
    with pytest.raises(ReplayError, match="exhausted with time 40 still incomplete at frontier \\[30\\]"):
        run_until(df, probe, 40, steps)  # the last epoch feeds time 35 but never advances past it
    assert probe.at(29) == {(1, 2): 1, (2, 1): 1}
