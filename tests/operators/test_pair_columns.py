"""Pairs as two id columns between nodes: a producer whose records are pairs of id columns (a
reduction's ``(key, out)``, the interning operator's ``(record, id)``, an input given two columns, a
map building pairs from a pair's items) hands them as they are to the consumers that take pair
columns (``Node.pair_columns``: a capture, a map reading only a record's items and constants), and
interns pair ids once for the others. The results are the same either way; what changes is the ids
the interner holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.tuning import EngineConfig


def _pages(n: int, pages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    index = np.arange(n, dtype=np.int64)
    return index % pages, index, np.ones(n, dtype=np.int64)


def _counted(through_map: bool, n: int = 1000, pages: int = 100):
    df = Dataflow()
    views = df.new_input("views")
    counts = views.collection.count()
    if through_map:  # a consumer that reads the whole record takes record ids: the pairs are interned for it
        counts = counts.map(lambda pair: pair)
    out = counts.capture()
    views.update_many(*_pages(n, pages))
    views.advance_to(n)
    df.run()
    return df, out


def test_a_reduction_hands_a_capture_its_output_pairs_without_interning_them():
    df, out = _counted(False)
    df_ids, out_ids = _counted(True)
    expected = {(p, 10): 1 for p in range(100)}
    assert out.at(999) == out_ids.at(999) == expected
    records, times, diffs = out.drain_columns()
    assert records.shape == (1000 + 900, 2)  # each view moves its page's count: 1,000 new counts, 900 retracted
    # the count of page p at the time of its k-th view is k (its earlier count retracted there)
    final = {}
    for (page, count), diff in zip(records.tolist(), diffs.tolist()):
        final[(page, count)] = final.get((page, count), 0) + diff
    assert {k: d for k, d in final.items() if d} == expected
    # the outputs ((page, count) at each view's time: 1,000 distinct pairs) took no pair id here
    assert len(df_ids.interner) - len(df.interner) >= 1000


def test_a_reduction_feeding_a_capture_and_another_consumer_gives_both_the_same_records():
    df = Dataflow()
    views = df.new_input("views")
    counts = views.collection.count()
    direct = counts.capture()
    mapped = counts.map(lambda pair: (pair[1], pair[0])).capture()
    views.update_many(*_pages(300, 7))
    views.advance_to(300)
    df.run()
    assert direct.at(299) == {**{(p, 43): 1 for p in range(6)}, (6, 42): 1}
    assert {(c, p): d for (p, c), d in direct.at(299).items()} == mapped.at(299)


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.sampled_from([-2, -1, 1, 2])),
                min_size=1, max_size=60))
def test_pair_columns_and_pair_ids_give_the_same_captured_updates(executor, updates):
    """A reduction's output captured directly (pair columns) and through an identity map (pair ids):
    the same consolidated updates, with retractions and negative multiplicities."""
    captured = []
    for through_map in (False, True):
        df = Dataflow(config=EngineConfig(executor=executor))
        data = df.new_input("data")
        out = data.collection.count()
        if through_map:
            out = out.map(lambda pair: pair)
        cap = out.capture()
        for record, time, diff in updates:
            data.update(record, time, diff)
        data.advance_to(31)
        df.run()
        captured.append(sorted(cap.updates, key=repr))
    assert captured[0] == captured[1]


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@pytest.mark.parametrize("history", [True, False])
def test_a_capture_takes_pair_columns_and_pair_ids_from_two_producers(history, executor):
    df = Dataflow(config=EngineConfig(executor=executor))
    views = df.new_input("views")
    counts = views.collection.count()
    both = counts.concat(counts.map(lambda pair: (pair[0], -pair[1]))).capture(history=history)
    views.update_many(*_pages(50, 5))
    views.advance_to(50)
    df.run()
    got = {}
    for record, _time, diff in both.drain():
        got[record] = got.get(record, 0) + diff
    assert {k: d for k, d in got.items() if d} == {**{(p, 10): 1 for p in range(5)}, **{(p, -10): 1 for p in range(5)}}


def _views(df: Dataflow, columns: bool, n: int, pages: int):
    views = df.new_input("views")
    users = np.arange(n, dtype=np.int64)
    if columns:
        views.update_many(np.stack([users, users % pages], axis=1), users, np.ones(n, dtype=np.int64))
    else:
        for u in users.tolist():
            views.insert((u, u % pages), u)
    views.advance_to(n)
    return views


@pytest.mark.parametrize("executor", ["nodes", "plan"])
def test_an_input_of_two_columns_hands_a_projecting_map_the_columns(executor):
    """``(user, page)`` views given as an int array of two columns: the map taking the page reads its
    column, and no ``(user, page)`` pair id is made; one by one as tuples, the same counts."""
    got, held = [], []
    for columns in (True, False):
        df = Dataflow(config=EngineConfig(executor=executor))
        views = _views(df, columns, 500, 10)
        swapped = views.collection.map(lambda v: (v[1], v[0])).capture()
        counts = views.collection.map(lambda v: v[1]).count().capture()
        df.run()
        got.append((counts.at(499), swapped.at(499)))
        held.append(len(df.interner))
    assert got[0] == got[1]
    assert got[0][0] == {(p, 50): 1 for p in range(10)}
    assert got[0][1] == {(u % 10, u): 1 for u in range(500)}
    assert held[1] - held[0] >= 500  # the (user, page) pairs (and the swapped pairs) interned one by one only


@pytest.mark.parametrize("executor", ["nodes", "plan"])
def test_a_map_takes_pair_columns_and_record_ids_in_one_step(executor):
    """Two producers into one map: an input of two columns (pair columns) and a reduction's output
    through a map that reads the whole record (pair ids); the map's records are the same."""
    df = Dataflow(config=EngineConfig(executor=executor))
    views = _views(df, True, 40, 4)
    counts = views.collection.map(lambda v: v[1]).count().map(lambda pair: pair)
    both = views.collection.concat(counts).map(lambda r: (r[1], r[0])).capture()
    df.run()
    expected = {(u % 4, u): 1 for u in range(40)}
    expected.update({(10, p): 1 for p in range(4)})
    assert both.at(39) == expected


def test_a_map_of_constants_and_items_over_pair_columns():
    df = Dataflow()
    views = _views(df, True, 6, 3)
    out = views.collection.map(lambda v: (v[-1], ("page", v[-2]))).capture()
    const = views.collection.map(lambda v: "x").capture()
    df.run()
    assert out.at(5) == {(u % 3, ("page", u)): 1 for u in range(6)}
    assert const.at(5) == {"x": 6}


@pytest.mark.parametrize("executor", ["nodes", "plan"])
def test_connected_components_of_edges_given_as_columns_intern_no_pair(executor):
    """Edges given as two columns: every pair of connected components (the edges, their swaps, the
    seeds, the offers of a join, the labels of a min fed back, arranged by node and leaving the loop)
    travels as two id columns, so the interner holds the nodes' ints (and the empty record of the
    arrangements by self) only; given one by one as tuples, the same labels."""
    from ddflow.operators.library import connected_components

    edges = np.random.default_rng(1).integers(0, 60, size=(100, 2))
    labels, held = [], []
    for columns in (True, False):
        df = Dataflow(config=EngineConfig(executor=executor))
        e = df.new_input("edges")
        out = connected_components(e.collection).capture()
        if columns:
            e.update_many(edges, np.arange(100), np.ones(100, dtype=np.int64))
        else:
            for i, (a, b) in enumerate(edges.tolist()):
                e.insert((a, b), i)
        e.advance_to(100)
        df.run()
        labels.append({t: out.at(t) for t in (0, 50, 99)})
        held.append(len(df.interner))
    assert labels[0] == labels[1]
    assert all(node >= label for node, label in labels[0][99])
    nodes = len(set(edges.ravel().tolist()))
    assert held[0] <= nodes + 1 < held[1]


def test_an_input_interns_only_the_fields_its_consumers_read():
    """``(user, page)`` views given as two columns to a map reading only the page (the count per
    page): the users' ints are never interned; with a second consumer that reads whole records,
    they are (and the pairs too), and the counts are the same."""
    got, held = [], []
    for whole in (False, True):
        df = Dataflow()
        views = _views(df, True, 500, 10)
        counts = views.collection.map(lambda v: v[1]).count().capture()
        if whole:
            views.collection.capture()
        df.run()
        got.append(counts.at(499))
        held.append(len(df.interner))
    assert got[0] == got[1] == {(p, 50): 1 for p in range(10)}
    assert held[0] <= 51 + 1  # the ints 0..50 (the pages 0..9, their counts 1..50) and the empty record
    assert held[1] >= 500  # the users 0..499 too (a capture takes the pairs as columns: no pair id)


_FIELDS = {"first": (lambda r: r[0], lambda a, b: a), "second": (lambda r: r[-1], lambda a, b: b),
           "constant": (lambda r: "c", lambda a, b: "c")}


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 4), st.integers(0, 9), st.sampled_from([-2, -1, 1, 3])),
                min_size=1, max_size=50),
       st.sampled_from([("first",), ("second",), ("constant",), ("first", "constant"), ("first", "whole")]))
def test_maps_reading_some_fields_of_an_input_agree_with_the_records(executor, updates, readers):
    """An input of two int columns whose consumers read one field, none (a constant), or whole
    records beside a map of one field: at every time each map's counts are those of the records
    given, with retractions and negative multiplicities."""
    df = Dataflow(config=EngineConfig(executor=executor))
    data = df.new_input("data")
    maps = [(data.collection.map(_FIELDS[r][0]).count().capture(), _FIELDS[r][1]) for r in readers if r != "whole"]
    whole = data.collection.capture() if "whole" in readers else None
    records = np.array([(a, b) for a, b, _t, _d in updates], dtype=np.int64)
    times = np.array([t for _a, _b, t, _d in updates], dtype=np.int64)
    diffs = np.array([d for _a, _b, _t, d in updates], dtype=np.int64)
    data.update_many(records, times, diffs)
    data.advance_to(10)
    df.run()
    for t in range(10):
        seen = [(a, b, d) for a, b, time, d in updates if time <= t]
        for cap, field in maps:
            totals: dict = {}
            for a, b, d in seen:
                totals[field(a, b)] = totals.get(field(a, b), 0) + d
            assert cap.at(t) == {(k, n): 1 for k, n in totals.items() if n}
        if whole is not None:
            totals = {}
            for a, b, d in seen:
                totals[(a, b)] = totals.get((a, b), 0) + d
            assert whole.at(t) == {k: n for k, n in totals.items() if n}


def _swapped_distinct(consumer: str, executor: str = "plan", n: int = 400):
    """``(a, b)`` records made distinct (pair ids leave the reduction), then swapped by a map whose
    consumer takes pair columns (a capture) or pair ids (a ``distinct``, arranged by the whole record)."""
    df = Dataflow(config=EngineConfig(executor=executor))
    data = df.new_input("pairs")
    swapped = data.collection.distinct().map(lambda r: (r[1], r[0]))
    out = (swapped if consumer == "capture" else swapped.distinct()).capture()
    for i in range(n):
        data.insert((i, i % 7), i)
    data.advance_to(n)
    df.run()
    return df, out


@pytest.mark.parametrize("executor", ["nodes", "plan"])
def test_a_map_rearranging_pair_ids_hands_a_capture_columns_without_interning(executor):
    """Pair records that come as ids (a reduction's output keyed by the whole record) through a map
    that only rearranges their items: the capture takes the built columns, so the swapped pairs get
    no id; before a consumer that needs ids they are interned, with the same records."""
    df, out = _swapped_distinct("capture", executor)
    df_ids, out_ids = _swapped_distinct("distinct", executor)
    expected = {(i % 7, i): 1 for i in range(400)}
    assert out.at(399) == out_ids.at(399) == expected
    swapped_new = set(expected) - {(i, i % 7) for i in range(400)}  # (the first 7 swap into themselves)
    assert len(df_ids.interner) - len(df.interner) >= len(swapped_new) == 393


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.tuples(st.integers(0, 4), st.integers(0, 4)),
                                    st.tuples(st.tuples(st.integers(0, 2), st.integers(0, 2)), st.integers(0, 3)),
                                    st.integers(0, 4)),
                          st.integers(0, 20), st.sampled_from([-2, -1, 1, 2])),
                min_size=1, max_size=50))
def test_a_map_of_pair_ids_agrees_with_the_records_at_every_time(executor, updates):
    """A map reading only items and constants over record ids that are pairs, nested pairs, or not
    pairs at all (ints: the function's own error for those is avoided by a filter), with retractions
    and negative multiplicities: at every time, the map of the accumulated input."""
    df = Dataflow(config=EngineConfig(executor=executor))
    data = df.new_input("records")
    pairs = data.collection.filter(lambda r: isinstance(r, tuple)).distinct()
    out = pairs.map(lambda r: (r[1], ("k", r[0]))).capture()
    bare = pairs.map(lambda r: r[0]).capture()
    for record, time, diff in updates:
        data.update(record, time, diff)
    data.advance_to(21)
    df.run()
    for t in range(21):
        acc: dict = {}
        for record, time, diff in updates:
            if time <= t and isinstance(record, tuple):
                acc[record] = acc.get(record, 0) + diff
        present = [r for r, d in acc.items() if d > 0]
        assert out.at(t) == {(r[1], ("k", r[0])): 1 for r in present}
        firsts: dict = {}
        for r in present:
            firsts[r[0]] = firsts.get(r[0], 0) + 1
        assert bare.at(t) == firsts
