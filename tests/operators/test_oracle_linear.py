"""Oracle checks for the linear operators: map, filter, flat_map, concat, negate, consolidate, inspect."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle_harness import check_pipeline, pairs, small_ints, sources

from ddflow.operators.testing import accumulate

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers


@given(sources(small_ints))
def test_identity_capture(srcs):
    check_pipeline(lambda a: a, srcs)


@given(sources(small_ints))
def test_map_merges_records(srcs):
    check_pipeline(lambda a: a.map(lambda r: r % 3), srcs)


@given(sources(pairs))
def test_map_to_tuples_and_strings(srcs):
    check_pipeline(lambda a: a.map(lambda kv: (str(kv[0]), kv[0] + kv[1])), srcs)


@given(sources(small_ints))
def test_filter(srcs):
    check_pipeline(lambda a: a.filter(lambda r: r % 2 == 0), srcs)


@given(sources(small_ints))
def test_flat_map_fans_out_and_drops(srcs):
    # r -> r % 3 copies of (r, i): zero, one or two outputs, some shared between inputs.
    check_pipeline(lambda a: a.flat_map(lambda r: [(r // 2, i) for i in range(r % 3)]), srcs)


@given(sources(pairs))
def test_flat_map_generator(srcs):
    check_pipeline(lambda a: a.flat_map(lambda kv: (x for x in kv)), srcs)


@given(sources(small_ints, 3))
def test_concat_three_inputs(srcs):
    check_pipeline(lambda a, b, c: a.concat(b, c), srcs)


@given(sources(small_ints, 2))
def test_concat_with_itself(srcs):
    check_pipeline(lambda a, b: a.concat(a, b.map(lambda r: r + 1)), srcs)


@given(sources(small_ints, 2))
def test_negate_cancels(srcs):
    check_pipeline(lambda a, b: a.negate().concat(b), srcs)


@given(sources(small_ints, 2))
def test_difference_to_zero_is_empty(srcs):
    check_pipeline(lambda a, b: (a.concat(a.negate()), a.concat(b).concat(b.negate())), srcs)


@given(sources(small_ints))
def test_consolidate(srcs):
    check_pipeline(lambda a: a.map(lambda r: r // 2).consolidate(), srcs)


@given(sources(small_ints))
def test_inspect_sees_every_update_and_passes_through(srcs):
    seen: list[tuple[object, int, int]] = []

    def pipeline(a):
        # f gets one argument, the update tuple (record, time, diff), as differential's inspect.
        return a.map(lambda r: r % 4).inspect(seen.append)

    def inspected_matches(df, t):
        # Everything inspected up to t accumulates to the collection at t.
        want = accumulate(((r % 4, time, d) for r, time, d in srcs[0].updates), t)
        assert accumulate(seen, t) == want, f"inspect calls do not accumulate to the input at {t}"
        assert all(isinstance(time, int) and diff != 0 for _, time, diff in seen)

    # The pipeline is also evaluated by the oracle, whose inspect calls nothing.
    check_pipeline(pipeline, srcs, also=inspected_matches)


@given(sources(st.sampled_from(["a", "b", "c", ("a", 1), b"x", 2.5])))
def test_mixed_hashable_records(srcs):
    check_pipeline(lambda a: a.map(lambda r: (type(r).__name__, r)).concat(a.map(lambda r: r)), srcs)
