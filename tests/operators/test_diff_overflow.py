"""Diffs never wrap: wherever the engine sums diffs (consolidation, a capture's accumulation, the
input a reduction accumulates, the diffs it emits, a join's products, a negation), a result outside
int64 raises ``DiffError`` naming the operator, the record and the time, instead of a wrapped count."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow, DiffError

BIG = 2**62
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def feed(updates, build):
    """A dataflow over one input fed ``updates`` ``(record, time, diff)``, built by ``build(collection)``;
    returns ``(dataflow, capture)`` after advancing the input past every time and running."""
    df = Dataflow()
    x = df.new_input("x")
    cap = build(x.collection).capture()
    for record, time, diff in updates:
        x.update(record, time, diff)
    x.advance_to(100)
    df.run()
    return df, cap


def test_two_diffs_of_one_record_at_one_time_are_refused():
    with pytest.raises(DiffError, match=r"'rec'.*|.*'rec'") as exc:
        feed([("rec", 5, BIG), ("rec", 5, BIG)], lambda c: c)
    assert exc.value.time == (5,) and exc.value.operator is not None
    assert "int64" in str(exc.value) and "(5,)" in str(exc.value)


def test_a_sum_that_comes_back_into_int64_is_exact():
    _, cap = feed([("rec", 5, BIG), ("rec", 5, BIG), ("rec", 5, -BIG)], lambda c: c)
    assert cap.at(5) == {"rec": BIG}


def test_a_capture_accumulating_across_times_refuses_the_overflowing_time():
    _, cap = feed([("rec", 5, BIG), ("rec", 6, BIG)], lambda c: c)
    assert cap.at(5) == {"rec": BIG}
    with pytest.raises(DiffError, match="'rec'"):
        cap.at(6)


def test_count_refuses_a_multiplicity_outside_int64():
    with pytest.raises(DiffError, match="count") as exc:
        feed([("rec", 5, BIG), ("rec", 6, BIG)], lambda c: c.count())
    assert exc.value.time == (6,)
    _, cap = feed([("rec", 5, BIG), ("rec", 6, BIG - 1)], lambda c: c.count())
    assert cap.at(6) == {("rec", I64_MAX): 1}


def test_distinct_refuses_an_input_multiplicity_outside_int64():
    with pytest.raises(DiffError, match="distinct") as exc:
        feed([("rec", 5, BIG), ("rec", 6, BIG)], lambda c: c.distinct())
    assert exc.value.time == (6,)


def test_distinct_inside_a_loop_refuses_it_too():
    with pytest.raises(DiffError, match="distinct") as exc:
        feed([(1, 5, BIG), (1, 6, BIG)], lambda c: c.iterate(lambda x: x.distinct()))
    assert exc.value.time == (6, 0)


def test_reduce_refuses_an_output_diff_outside_int64():
    """The output goes from I64_MAX copies to -I64_MAX copies: the diff between them leaves int64."""
    def flip(key, vals):
        return [("out", I64_MAX if sum(c for _, c in vals) == 1 else -I64_MAX)]
    with pytest.raises(DiffError, match="reduce"):
        feed([((0, "a"), 5, 1), ((0, "a"), 6, 1)], lambda c: c.reduce(flip))
    _, cap = feed([((0, "a"), 5, 1)], lambda c: c.reduce(flip))
    assert cap.at(5) == {(0, "out"): I64_MAX}


def test_join_refuses_a_product_of_diffs_outside_int64():
    def build(c):
        return c.join(c)
    with pytest.raises(DiffError, match="join"):
        feed([((0, "a"), 5, 2**32)], build)
    _, cap = feed([((0, "a"), 5, 2**31)], build)
    assert cap.at(5) == {(0, ("a", "a")): 2**62}


def test_negate_refuses_the_least_int64():
    with pytest.raises(DiffError, match="negate"):
        feed([("rec", 5, I64_MIN)], lambda c: c.negate())


def test_diffs_outside_int64_are_refused_at_the_input():
    df = Dataflow()
    x = df.new_input("x")
    with pytest.raises(DiffError, match="outside int64"):
        x.update("rec", 5, 2**63)
    with pytest.raises(DiffError, match="outside int64"):
        x.update_many(["a"], [5], [-(2**63) - 1])


def test_a_doubly_nested_reduction_refuses_it_and_keeps_exact_large_counts():
    """Times of three coordinates go through the reduction's per-key path (exact sums there)."""
    def body(c):
        return c.iterate(lambda x: x.iterate(lambda y: y.distinct()))
    with pytest.raises(DiffError, match="distinct") as exc:
        feed([("rec", 5, BIG), ("rec", 6, BIG)], body)
    assert exc.value.time == (6, 0, 0)
    _, cap = feed([("rec", 5, BIG), ("rec", 6, BIG - 1), ("other", 6, -1)], body)
    assert cap.at(5) == {"rec": 1} and cap.at(6) == {"rec": 1}


def test_reduce_refuses_counts_of_one_output_summing_outside_int64():
    with pytest.raises(DiffError, match="reduce") as exc:
        feed([((0, "a"), 5, 1)], lambda c: c.reduce(lambda k, vs: [("o", BIG), ("o", BIG)]))
    assert exc.value.time == (5,)
    _, cap = feed([((0, "a"), 5, 1)], lambda c: c.reduce(lambda k, vs: [("o", BIG), ("o", BIG), ("o", -BIG)]))
    assert cap.at(5) == {(0, "o"): BIG}
    with pytest.raises(DiffError, match="outside int64"):
        feed([((0, "a"), 5, 1)], lambda c: c.reduce(lambda k, vs: [("o", 2**63)]))


def test_threshold_refuses_a_multiplicity_outside_int64_from_its_function():
    with pytest.raises(DiffError, match="outside int64"):
        feed([("rec", 5, 1)], lambda c: c.threshold(lambda r, n: 2**63))
    _, cap = feed([("rec", 5, 1), ("rec", 6, 1)], lambda c: c.threshold(lambda r, n: I64_MAX - 2 + n))
    assert cap.at(5) == {"rec": I64_MAX - 1} and cap.at(6) == {"rec": I64_MAX}
