"""Oracle checks for reductions: reduce, min, max, sum, top_k, count, distinct, threshold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle_harness import check_pipeline, pairs, small_ints, sources

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

wide_pairs = st.tuples(st.integers(0, 2), st.integers(-3, 3))


def _checked_logic(calls_ok: list[str], logic):
    """Wrap reduce logic so every call is checked against the contract; violations are recorded."""

    def wrapped(key, vals):
        if not vals:
            calls_ok.append(f"called on an empty group for key {key!r}")
        if any(count == 0 for _, count in vals):
            calls_ok.append(f"zero count passed for key {key!r}: {vals!r}")
        if [v for v, _ in vals] != sorted(v for v, _ in vals):
            calls_ok.append(f"vals not sorted for key {key!r}: {vals!r}")
        if len({v for v, _ in vals}) != len(vals):
            calls_ok.append(f"a val listed twice for key {key!r}: {vals!r}")
        return logic(key, vals)

    return wrapped


@given(sources(wide_pairs))
def test_reduce_weighted_sum(srcs):
    problems: list[str] = []
    logic = _checked_logic(problems, lambda k, vals: [(sum(v * c for v, c in vals), 1)])
    check_pipeline(lambda a: a.reduce(logic), srcs)
    assert not problems, problems[:5]


@given(sources(pairs))
def test_reduce_many_outputs_with_negative_counts(srcs):
    problems: list[str] = []

    def logic(key, vals):
        out = [(("val", v), c * 2) for v, c in vals if c > 0]
        out.append((("groupsize", len(vals)), -1))
        out.append((("zero",), 0))  # zero-count outputs are legal and contribute nothing
        return out

    check_pipeline(lambda a: a.reduce(_checked_logic(problems, logic)), srcs)
    assert not problems, problems[:5]


@given(sources(pairs))
def test_reduce_returning_nothing_for_some_keys(srcs):
    problems: list[str] = []

    def logic(key, vals):
        total = sum(c for _, c in vals)
        return [] if total <= 0 else [(vals[0][0], total)]

    check_pipeline(lambda a: a.reduce(_checked_logic(problems, logic)), srcs)
    assert not problems, problems[:5]


@given(sources(pairs, 2))
def test_reduce_of_a_join(srcs):
    problems: list[str] = []
    logic = _checked_logic(problems, lambda k, vals: [(tuple(vals), 1)])
    check_pipeline(lambda a, b: a.join(b).map(lambda r: (r[0], r[1][0] - r[1][1])).reduce(logic), srcs)
    assert not problems, problems[:5]


@given(sources(wide_pairs))
def test_min(srcs):
    check_pipeline(lambda a: a.min(), srcs)


@given(sources(wide_pairs))
def test_max(srcs):
    check_pipeline(lambda a: a.max(), srcs)


@given(sources(wide_pairs))
def test_sum(srcs):
    check_pipeline(lambda a: a.sum(), srcs)


@given(sources(pairs), st.integers(1, 4))
def test_top_k(srcs, k):
    check_pipeline(lambda a: a.top_k(k), srcs)


@given(sources(small_ints))
def test_count(srcs):
    check_pipeline(lambda a: a.count(), srcs)


@given(sources(small_ints))
def test_distinct(srcs):
    check_pipeline(lambda a: a.distinct(), srcs)


@given(sources(small_ints))
def test_threshold(srcs):
    def f(record, count):
        if count == 0:
            raise AssertionError(f"threshold logic called with count 0 for {record!r}")
        return count * count if record % 2 else (1 if count >= 2 else -count if count < 0 else 0)

    check_pipeline(lambda a: a.threshold(f), srcs)


@given(sources(pairs, 2))
def test_reductions_on_a_shared_arrangement(srcs):
    def pipeline(a, b):
        arranged = a.concat(b.negate()).arrange_by_key()
        return arranged.min(), arranged.max(), arranged.sum(), arranged.top_k(2), arranged.reduce(
            lambda k, vals: [(len(vals), 1)]
        )

    check_pipeline(pipeline, srcs)


@given(sources(small_ints))
def test_count_and_distinct_on_arranged_by_self(srcs):
    def pipeline(a):
        arranged = a.map(lambda r: r % 4).arrange_by_self()
        return arranged.count(), arranged.distinct(), arranged.collection

    check_pipeline(pipeline, srcs)


@given(sources(pairs))
def test_distinct_then_count_keys(srcs):
    check_pipeline(lambda a: a.distinct().map(lambda kv: kv[0]).count(), srcs)


named_pairs = st.tuples(st.sampled_from(["ann", "bob", "cy"]), st.tuples(st.integers(0, 2), st.sampled_from("xy")))


@given(sources(named_pairs))
def test_reductions_with_string_keys_and_tuple_vals(srcs):
    def pipeline(a):
        return a.min(), a.max(), a.top_k(2), a.reduce(lambda k, vals: [(vals[-1][0], len(vals))])

    check_pipeline(pipeline, srcs)
