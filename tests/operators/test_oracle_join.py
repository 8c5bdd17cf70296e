"""Oracle checks for the join family (join, join_map, semijoin, antijoin) and shared arrangements."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle_harness import check_pipeline, pairs, sources

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

keys = st.integers(0, 3)


@given(sources(pairs, 2))
def test_join(srcs):
    check_pipeline(lambda a, b: a.join(b), srcs)


@given(sources(pairs))
def test_self_join(srcs):
    check_pipeline(lambda a: a.join(a), srcs)


@given(sources(pairs, 2))
def test_join_map(srcs):
    check_pipeline(lambda a, b: a.join_map(b, lambda k, x, y: (k + x) * 10 + y), srcs)


@given(sources(pairs, 2))
def test_join_of_derived_collections(srcs):
    # Keys remapped on both sides so that collisions and cancellations go through the join.
    def pipeline(a, b):
        left = a.map(lambda kv: (kv[0] % 2, kv[1]))
        right = b.concat(a.negate()).map(lambda kv: (kv[1] % 2, kv[0]))
        return left.join(right)

    check_pipeline(pipeline, srcs)


@given(sources(pairs, 2))
def test_semijoin_with_key_collection(srcs):
    check_pipeline(lambda a, b: a.semijoin(b.map(lambda kv: kv[0])), srcs)


@given(sources(pairs, 2))
def test_antijoin_with_key_collection(srcs):
    check_pipeline(lambda a, b: a.antijoin(b.map(lambda kv: kv[1])), srcs)


@given(sources(pairs, 2))
def test_semijoin_and_antijoin_with_arranged_keys(srcs):
    def pipeline(a, b):
        keyset = b.map(lambda kv: kv[0]).arrange_by_self()
        return a.semijoin(keyset), a.antijoin(keyset)

    check_pipeline(pipeline, srcs)


@given(sources(pairs, 3))
def test_arrange_by_key_shared_by_two_joins(srcs):
    def pipeline(a, b, c):
        shared = a.arrange_by_key()
        return shared.join(b), c.join(shared), shared.collection

    check_pipeline(pipeline, srcs)


@given(sources(pairs, 2))
def test_two_arranged_inputs_joined(srcs):
    def pipeline(a, b):
        left = a.arrange_by_key()
        right = b.arrange_by_key()
        return left.join(right), left.join_map(right, lambda k, x, y: (k, x - y)), right.semijoin(
            a.map(lambda kv: kv[1])
        )

    check_pipeline(pipeline, srcs)


def _arrangement_records(df) -> int:
    return sum(stats["records"] for stats in df.arrangement_stats().values())


def test_shared_arrangement_keeps_one_index():
    """Two joins reading one ``arrange_by_key()`` hold one index of ``a``, not two.

    The control dataflow gives the second join a copy of ``a`` (``a.map(identity)``), which
    must be indexed on its own: exactly one more arrangement, of exactly ``a``'s 200 records.
    """
    from ddflow.operators import Dataflow

    def build(share: bool):
        df = Dataflow()
        a, b, c = (df.new_input(name) for name in ("a", "b", "c"))
        left = a.collection.arrange_by_key()
        other = left if share else a.collection.map(lambda r: r)
        probes = [left.join(b.collection).capture(), c.collection.join(other).capture()]
        for i in range(200):
            a.insert((i % 50, i), 10 + i)
            b.insert((i % 50, -i), 10 + i)
            c.insert((i % 50, 2 * i), 10 + i)
        for session in (a, b, c):
            session.advance_to(1_000)
        df.run()
        return df, probes

    shared_df, shared = build(True)
    separate_df, separate = build(False)
    for mine, theirs in zip(shared, separate):
        assert mine.at(999) == theirs.at(999)
        assert len(mine.at(999)) == 200 * 4
    shared_stats = shared_df.arrangement_stats()
    separate_stats = separate_df.arrangement_stats()
    assert len(shared_stats) == len(separate_stats) - 1, (shared_stats, separate_stats)
    assert _arrangement_records(shared_df) == _arrangement_records(separate_df) - 200


named_pairs = st.tuples(st.sampled_from(["ann", "bob", "cy"]), st.tuples(st.integers(0, 2), st.sampled_from("xy")))


@given(sources(named_pairs, 2))
def test_join_and_semijoin_with_string_keys_and_tuple_vals(srcs):
    def pipeline(a, b):
        return a.join(b), a.semijoin(b.map(lambda kv: kv[0]).filter(lambda k: k != "cy"))

    check_pipeline(pipeline, srcs)
