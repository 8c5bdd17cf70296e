"""Pairs as two id columns between nodes: a producer whose records are pairs of id columns (a
reduction's ``(key, out)``, the interning operator's ``(record, id)``) hands them as they are to the
consumers that take pair columns (``Node.pair_columns``: a capture), and interns pair ids once for
the others. The results are the same either way; what changes is the ids the interner holds."""

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
    if through_map:  # a consumer that takes record ids: the pairs are interned for it
        counts = counts.map(lambda pair: (pair[0], pair[1]))
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
