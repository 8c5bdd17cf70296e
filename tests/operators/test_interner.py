"""The interner against a dict (Python equality), the key table against a dict, memos against direct calls.

Values are interned by kind (ints and plain pairs in hash tables, the rest in a dict with aliases for
objects equal to ints or pairs): whatever the kind, equal values must get one id, unequal values
distinct ids, and every id must give back a value equal to the ones interned under it.
"""

from __future__ import annotations

import collections
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow, DiffError, ShapeError
from ddflow.operators.values.interner import Interner
from ddflow.operators.values.keytable import KeyTable
from ddflow.operators.values.memo import Memo

Point = collections.namedtuple("Point", "x y")

leaves = st.one_of(
    st.integers(-3, 3),
    st.integers(-(2**70), 2**70),
    st.sampled_from([True, False, 1.0, 0.0, -0.0, 2.5, 2.0**63, None, "a", "b", b"a", (), 1 + 0j,
                     Decimal(1), Decimal("2.5"), Fraction(5, 2), Point(1, 2), Point(0, 0), (1, 2, 3)]),
)
values = st.recursive(leaves, lambda inner: st.tuples(inner, inner), max_leaves=6)


def same(a: object, b: object) -> bool:
    """Python's equality as a dict sees it (identity first)."""
    return a is b or a == b


def check_against_dict(batches: list[list], one_at_a_time: bool = False) -> Interner:
    interner = Interner()
    by_value: dict = {}
    for batch in batches:
        got = [interner.id(v) for v in batch] if one_at_a_time else interner.ids(batch).tolist()
        for v, i in zip(batch, got):
            if v in by_value:
                assert by_value[v] == i, (v, by_value[v], i)
            else:
                assert i not in by_value.values(), (v, i)
                by_value[v] = i
            assert same(interner.value(i), v)
    ids = list(by_value.values())
    assert all(0 <= i < len(interner) for i in ids)  # (tuples' components have ids of their own)
    for v, back in zip(by_value, interner.value_list(np.array(ids, dtype=np.int64))):
        assert same(back, v)
    return interner


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(values, max_size=30), max_size=6), st.booleans())
def test_ids_follow_python_equality(batches, one_at_a_time):
    check_against_dict(batches, one_at_a_time)


def test_equal_values_of_other_kinds_share_the_first_ones_id():
    interner = Interner()
    one, true, one_f = interner.ids([1, True, 1.0]).tolist()
    assert one == true == one_f and type(interner.value(one)) is int
    t, i = interner.ids([True, 7]).tolist()[0], interner.id(1)
    assert t == i
    # an object first: the int aliases it
    other = Interner()
    first = other.id(Decimal(5))
    assert other.ids([5, 5.0]).tolist() == [first, first]
    assert isinstance(other.value(first), Decimal)
    # a named tuple first keeps its type; the plain tuple equal to it takes its id
    p = other.id(Point(3, 4))
    assert other.id((3, 4)) == p and type(other.value(p)) is Point
    assert other.split(np.array([p]), "step")[0].tolist() == [other.id(3)]
    # out of int64: a dict like any object
    big = other.id(2**64)
    assert other.id(float(2**64)) == big and other.value(big) == 2**64


def test_tuples_nest_and_split():
    interner = Interner()
    recs = [(1, "a"), ("k", (2, 3)), ((1, 2), (1, 2)), (None, ())]
    ids = interner.ids(recs)
    keys, vals = interner.split(ids, "arrange")
    assert interner.value_list(keys) == [1, "k", (1, 2), None]
    assert interner.value_list(vals) == ["a", (2, 3), (1, 2), ()]
    assert interner.pair(keys, vals).tolist() == ids.tolist()
    deep = 0
    for i in range(200):
        deep = (i, deep)
    d = interner.id(deep)
    assert interner.value(d) == deep and interner.ids([deep, deep]).tolist() == [d, d]


def test_bad_records_name_themselves():
    interner = Interner()
    with pytest.raises(ShapeError, match=r"record \(1, \[2\]\) is not hashable"):
        interner.ids([(1, 2), (1, [2])])
    with pytest.raises(ShapeError, match=r"record \{'a': 1\} is not hashable"):
        interner.ids(["x", {"a": 1}])
    with pytest.raises(ShapeError, match="arrange needs \\(key, val\\) records, got 5"):
        interner.split(interner.ids([(1, 2), 5]), "arrange")
    with pytest.raises(ShapeError, match="got \\(1, 2, 3\\)"):
        interner.split(interner.ids([(1, 2, 3)]), "arrange")


def test_known_lists_skip_lookups_and_keep_ids():
    interner = Interner()
    ids = interner.ids([(0, r) for r in range(1000)])
    known: list = []
    values = interner.value_list(ids, known)
    before = len(interner)
    out = interner.ids([(v[1], v) for v in values], known)
    assert len(interner) == before + 1000
    assert interner.value_list(out) == [(r, (0, r)) for r in range(1000)]
    assert interner.ids([v[1] for v in values], known).tolist() == interner.ids(list(range(1000))).tolist()


def test_chunks_of_one_shape_are_merged_and_of_other_shapes_kept_in_order():
    interner = Interner()
    chunks = [([(i, str(i)) for i in range(10, 60)], []), ([(i, str(i)) for i in range(60, 110)], []),
              ([True, 2, "x"], []), ([1.0, 1, 2.5], []), ([(i, str(i)) for i in range(10, 110)], [])]
    ids = interner.ids_of_chunks(iter(chunks)).tolist()
    flat = [v for chunk, _ in chunks for v in chunk]
    assert len(ids) == len(flat)
    for v, i in zip(flat, ids):
        assert same(interner.value(i), v)
    assert ids[100] == ids[103] == ids[104]  # True, then 1.0 and 1: True holds the id
    assert interner.value(ids[100]) is True
    assert ids[:100] == ids[-100:]


def test_large_batches_match_small_ones():
    rng = np.random.default_rng(7)
    keys = rng.integers(-(2**63), 2**63 - 1, 300_000, dtype=np.int64)
    keys[::3] = keys[1::3]  # repeats inside the batch
    big, small = Interner(), Interner()
    a = big.int_ids(keys)
    b = np.concatenate([small.int_ids(keys[i : i + 1000]) for i in range(0, len(keys), 1000)])
    assert len(big) == len(small) == len(np.unique(keys))
    first = {}
    for x, i, j in zip(keys.tolist(), a.tolist(), b.tolist()):
        assert first.setdefault(x, (i, j)) == (i, j)
    assert big.value_list(a) == keys.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(-40, 40) | st.integers(-(2**63), 2**63 - 1), max_size=50), max_size=8))
def test_key_table_numbers_distinct_keys_densely_in_order_of_first_appearance(batches):
    table, ref = KeyTable(), {}
    for batch in batches:
        keys = np.array(batch, dtype=np.int64)
        assert table.find(keys).tolist() == [ref.get(k, -1) for k in batch]
        for k in batch:
            ref.setdefault(k, len(ref))
        assert table.index(keys).tolist() == [ref[k] for k in batch]
    assert table.keys.tolist() == list(ref)


def test_key_table_in_bulk():
    rng = np.random.default_rng(3)
    table, ref = KeyTable(), {}
    for n in (70_000, 100_000, 5_000, 200_000):
        keys = np.concatenate([rng.integers(0, 150_000, n // 2), rng.integers(-(2**62), 2**62, n // 2)])
        for k, i in zip(keys.tolist(), table.index(keys).tolist()):
            assert ref.setdefault(k, i) == i
        assert sorted(ref.values()) == list(range(len(ref))) and table.n == len(ref)
    assert table.find(np.array(list(ref), dtype=np.int64)).tolist() == list(ref.values())


def test_memo_computes_each_code_once_dense_and_sparse():
    seen: list[int] = []

    def compute(codes):
        seen.extend(codes.tolist())
        return codes * 3 + 1

    m = Memo(compute)
    rng = np.random.default_rng(1)
    for codes in (rng.integers(0, 5000, 3000), rng.integers(0, 5000, 3000), np.arange(10), np.array([2**40, 7])):
        assert m(codes).tolist() == (codes * 3 + 1).tolist()
    assert sorted(seen) == sorted(set(seen)) and len(m) == len(seen)
    small = Memo(lambda c: c % 2 == 0, np.int8)
    assert small(np.array([4, 5, 4])).tolist() == [1, 0, 1]


def test_memo_forgets_codes_whose_compute_failed():
    calls = []

    def compute(codes):
        calls.append(codes.tolist())
        if len(calls) == 1:
            raise RuntimeError("boom")
        return codes + 1

    for codes in (np.array([3, 4]), np.array([2**40, 5])):
        calls.clear()
        m = Memo(compute)
        with pytest.raises(RuntimeError):
            m(codes)
        assert m(codes).tolist() == (codes + 1).tolist()


def test_memo_keeps_its_results_right_after_a_failed_compute_of_many_codes():
    """Regression: forgetting the codes of a failed call re-numbered the kept ones in the table's own
    order, so their results no longer matched them (4,942 of 5,000 wrong)."""
    fail = [False]

    def compute(codes):
        if fail[0]:
            raise RuntimeError("boom")
        return codes * 7 + 1

    m = Memo(compute)
    rng = np.random.default_rng(3)
    old = np.unique(rng.integers(0, 2**40, 5000))  # sparse: a table
    assert m(old).tolist() == (old * 7 + 1).tolist()
    fail[0] = True
    with pytest.raises(RuntimeError):
        m(np.concatenate([old[:10], rng.integers(2**41, 2**42, 3000)]))
    fail[0] = False
    assert m(old).tolist() == (old * 7 + 1).tolist()
    assert len(m) == len(old)


def test_memo_table_starts_afresh_at_its_limit_and_stays_right():
    computed = []

    def compute(codes):
        computed.extend(codes.tolist())
        return codes * 5 - 2

    m = Memo(compute)
    m.limit = 1000
    rng = np.random.default_rng(7)
    for _ in range(40):
        codes = rng.integers(0, 2**40, 300)  # sparse: the memo keeps a table
        assert m(codes).tolist() == (codes * 5 - 2).tolist()
        assert len(m) < 1000 + 300
    assert m.restarts >= 8
    again = np.array(computed[:50], dtype=np.int64)  # long since dropped: computed once more
    before = len(computed)
    assert m(again).tolist() == (again * 5 - 2).tolist()
    assert len(computed) == before + len(set(again.tolist()))


def test_integer_columns_enter_as_ints():
    df = Dataflow()
    recs = df.new_input("recs")
    probe = recs.collection.map(lambda r: (type(r).__name__, r)).capture()
    recs.update_many(np.array([3, 4, 3], dtype=np.uint32), [0, 0, 1], [1, 1, 1])
    recs.insert(3, 2)
    recs.close()
    df.run()
    assert probe.at(2) == {("int", 3): 3, ("int", 4): 1}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3)), max_size=30),
       st.sampled_from([np.int64, np.int32, np.uint64]))
def test_update_many_takes_rows_of_an_int_array_as_tuples(width, rows, dtype):
    """A two-dimensional int array feeds record i = the tuple of row i: the same collection as the
    tuples themselves (pairs interned from the columns, other widths as tuples)."""
    info = np.iinfo(dtype)
    values = [[(a + j) % (int(info.max) + 1 - int(info.min)) + int(info.min) for j in range(width)] for a, _ in rows]
    times = [abs(t) for _, t in rows]
    diffs = [t or 1 for _, t in rows]
    df = Dataflow()
    columns, tuples = df.new_input("columns"), df.new_input("tuples")
    got = columns.collection.map(lambda r: (type(r).__name__, r)).distinct().capture()
    want = tuples.collection.map(lambda r: (type(r).__name__, r)).distinct().capture()
    counted = columns.collection.count().capture()
    counted_want = tuples.collection.count().capture()
    columns.update_many(np.array(values, dtype=dtype).reshape(len(rows), width), times, diffs)
    tuples.update_many([tuple(v) for v in values], times, diffs)
    columns.close()
    tuples.close()
    df.run()
    for t in range(4):
        assert got.at(t) == want.at(t) and counted.at(t) == counted_want.at(t)


def test_update_many_names_a_bad_row_as_its_tuple():
    df = Dataflow()
    recs = df.new_input("recs")
    with pytest.raises(DiffError, match=r"record \(5, 6\)"):
        recs.update_many(np.array([[1, 2], [5, 6]]), [0, 0], [1, 0])
    with pytest.raises(ShapeError, match="at least one column"):
        recs.update_many(np.empty((2, 0), dtype=np.int64), [0, 0], [1, 1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3) | st.integers(-(2**63), 2**63 - 1),
                          st.integers(-3, 3) | st.integers(-(2**63), 2**63 - 1)), max_size=40),
       st.integers(1, 5))
def test_pair_into_gives_the_ids_of_pair(pairs, slice_):
    """Packing the codes into the second column's buffer, a few at a time, and writing their ids
    over them numbers the same pairs as ``pair`` in a twin interner (the pairs' table, grown first,
    keeps the pairs interned before), and the ids stand for the tuples (int64 extremes included)."""
    from ddflow.operators.values import interner as module

    twin, mine = Interner(), Interner()
    before_pairs = pairs[: len(pairs) // 2]
    assert twin.ids(before_pairs).tolist() == mine.ids(before_pairs).tolist()
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    want = twin.pair(twin.ids(firsts), twin.ids(seconds))
    keys, vals = mine.ids(firsts), mine.ids(seconds)
    before, module._PACK_SLICE = module._PACK_SLICE, slice_
    try:
        got = mine.pair_into(keys, vals)
    finally:
        module._PACK_SLICE = before
    assert got is vals and got.tolist() == want.tolist()
    assert mine.value_list(got) == pairs
    assert mine.ids(pairs).tolist() == got.tolist()
    assert mine.ids(before_pairs).tolist() == got[: len(before_pairs)].tolist()


def test_pair_into_grows_the_pairs_table_once_keeping_its_pairs():
    """A column larger than the table's room: the table is rebuilt once, first, with the pairs it held
    (found again under their ids), and the slices then fit without growing it."""
    from ddflow.operators.values import interner as module

    twin, mine = Interner(), Interner()
    held = [(i, -i) for i in range(1000)]
    assert twin.ids(held).tolist() == mine.ids(held).tolist()
    pairs = held[::3] + [(i, 2**63 - 1 - i) for i in range(3000)]
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    want = twin.pair(twin.ids(firsts), twin.ids(seconds))
    keys, vals = mine.ids(firsts), mine.ids(seconds)
    table = mine._space.pairs
    before, module._PACK_SLICE = module._PACK_SLICE, 7
    try:
        got = mine.pair_into(keys, vals)
    finally:
        module._PACK_SLICE = before
    assert got.tolist() == want.tolist()
    assert table.count == 4000 and len(table.slots) >= 4000 * 10 // 7
    assert mine.ids(held).tolist() == twin.ids(held).tolist()
    assert mine.value_list(got) == pairs
