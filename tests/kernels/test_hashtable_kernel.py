"""The compiled hash table kernels against their dict references, on random keys and edge cases, for
tagged tables (slots and tags) and untagged ones (slots alone)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.kernels import hashtable as ht

I64 = st.integers(-(2**63), 2**63 - 1)
KEYS = st.lists(st.integers(-8, 8) | I64 | st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**32, -(2**32)]),
                max_size=60)


FLAVOURS = pytest.mark.parametrize("tagged", [True, False, "into"], ids=["tagged", "untagged", "tagged-into"])


def _table(tagged: bool, capacity: int = ht.MIN_CAPACITY) -> tuple[tuple, int]:
    """An empty table, ``((slots, tags) or (slots,), count)`` (``tagged`` true or ``"into"``: tags)."""
    return (ht.empty(capacity) if tagged else (np.full(capacity, ht.EMPTY, dtype=np.int32),)), 0


def _find(table: tuple, keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    return ht.find_tagged(*table, keys, query) if len(table) == 2 else ht.find(table[0], keys, query)


def _insert(table: tuple, keys, query, count, free, nfree, nxt, limit, into: bool = False):
    """``(values, table, count, nfree, next_value, done)`` by the flavour's insert kernel (for
    ``insert_tagged_into``, the values written over a copy of ``query``, whose keys past ``done`` must
    stay, shown as ``-1`` as ``insert_tagged`` leaves them)."""
    if into:
        given = query.copy()
        out, slots, tags, count, nfree, nxt, done = ht.insert_tagged_into(*table, keys, given, count, free, nfree,
                                                                          nxt, limit)
        assert out is given or np.shares_memory(out, given)
        assert np.array_equal(given[done:], query[done:])
        out = given.copy()
        out[done:] = -1
        return out, (slots, tags), count, nfree, nxt, done
    if len(table) == 2:
        out, slots, tags, count, nfree, nxt, done = ht.insert_tagged(*table, keys, query, count, free, nfree, nxt,
                                                                     limit)
        assert (tags[slots >= 0] == ht.ref_tags(keys[slots[slots >= 0]])).all()
        return out, (slots, tags), count, nfree, nxt, done
    out, slots, count, nfree, nxt, done = ht.insert(table[0], keys, query, count, free, nfree, nxt, limit)
    return out, (slots,), count, nfree, nxt, done


@settings(max_examples=150, deadline=None)
@given(st.lists(KEYS, max_size=8), st.lists(st.integers(0, 199), unique=True, max_size=20),
       st.integers(0, 50), st.integers(0, 250))
@FLAVOURS
def test_insert_and_find_agree_with_a_dict(tagged, batches, free_list, start, limit):
    """Values are handed out in query order, free list first (from its end), then counting up from
    ``next_value``; a call stops before the key whose value would reach the limit or the keys array."""
    free_list = [f for f in free_list if f < start] or []
    keys = np.zeros(200, dtype=np.int64)
    ref_keys = keys.copy()
    table, count = _table(tagged)
    free = np.array(free_list, dtype=np.int64)
    nfree, nxt = len(free), start
    ref: dict[int, int] = {}
    r_free, r_nfree, r_next = free.copy(), nfree, nxt
    for batch in batches:
        query = np.array(batch, dtype=np.int64)
        assert _find(table, keys, query).tolist() == ht.ref_find(ref, query).tolist()
        out, table, count, nfree, nxt, done = _insert(table, keys, query, count, free, nfree, nxt, limit,
                                                      into=tagged == "into")
        slots = table[0]
        want, r_nfree, r_next, r_done = ht.ref_insert(ref, ref_keys, query, r_free, r_nfree, r_next, limit)
        assert (out.tolist(), nfree, nxt, done) == (want.tolist(), r_nfree, r_next, r_done)
        assert count == len(ref)
        assert int((slots >= 0).sum()) == count and count * ht.LOAD_DEN <= len(slots) * ht.LOAD_NUM
        if done < len(query):
            break
    assert keys.tolist() == ref_keys.tolist()
    if ref:
        every = np.array(list(ref), dtype=np.int64)
        assert _find(table, keys, every).tolist() == list(ref.values())


@settings(max_examples=80, deadline=None)
@given(st.lists(I64, unique=True, max_size=300), st.integers(0, 100), st.integers(0, 300), st.integers(0, 300),
       st.integers(0, 300))
def test_build_places_every_wanted_value_where_find_sees_it(distinct, extra, n, skip_lo, skip_len):
    keys = np.array(distinct, dtype=np.int64)
    n = min(n, len(keys))
    classes = (np.arange(len(keys)) % 3).astype(np.int8)
    wanted = np.array([True, False, True])
    want = ht.ref_build(keys, classes, wanted, n, skip_lo, skip_lo + skip_len)
    slots, tags = ht.build(keys, classes, wanted, n, ht.capacity_for(len(want)) + extra, skip_lo, skip_lo + skip_len)
    assert int((slots >= 0).sum()) == len(want)
    assert (tags[slots >= 0] == ht.ref_tags(keys[slots[slots >= 0]])).all()
    assert ht.find_tagged(slots, tags, keys, keys).tolist() == [want.get(k, -1) for k in distinct]
    misses = np.array([k ^ 0x5555 for k in distinct if k ^ 0x5555 not in set(distinct)], dtype=np.int64)
    assert (ht.find_tagged(slots, tags, keys, misses) == -1).all()


def test_tags_are_the_reference_tags():
    keys = np.array([0, 1, -1, 2**63 - 1, -(2**63), 2**32, 12345678901234], dtype=np.int64)
    table, _count = _table(True)
    _out, (slots, tags), *_ = _insert(table, keys.copy(), keys, 0, np.empty(0, dtype=np.int64), 0, 0, len(keys))
    assert sorted(tags[slots >= 0].tolist()) == sorted(ht.ref_tags(keys).tolist())
    assert len(set(ht.ref_tags(np.arange(10_000, dtype=np.int64)).tolist())) == 256


@FLAVOURS
def test_edge_cases_empty_one_equal_and_extremes(tagged):
    keys = np.zeros(8, dtype=np.int64)
    table, count = _table(tagged)
    empty = np.empty(0, dtype=np.int64)
    out, table, count, nfree, nxt, done = _insert(table, keys, empty, count, empty, 0, 0, 8, into=tagged == "into")
    assert (len(out), count, nxt, done) == (0, 0, 0, 0)
    same = np.full(5, -(2**63), dtype=np.int64)
    out, table, count, nfree, nxt, done = _insert(table, keys, same, count, empty, 0, 0, 8, into=tagged == "into")
    assert out.tolist() == [0] * 5 and count == 1 and nxt == 1 and done == 5
    ext = np.array([2**63 - 1, -(2**63), 0, -1], dtype=np.int64)
    out, table, count, nfree, nxt, done = _insert(table, keys, ext, count, empty, 0, nxt, 8, into=tagged == "into")
    assert out.tolist() == [1, 0, 2, 3] and _find(table, keys, ext).tolist() == [1, 0, 2, 3]


@FLAVOURS
def test_many_keys_grow_the_table_and_stay_findable(tagged):
    rng = np.random.default_rng(5)
    query = np.concatenate([np.arange(200_000), rng.integers(-(2**62), 2**62, 200_000), np.arange(1000)])
    keys = np.zeros(len(query), dtype=np.int64)
    table, count = _table(tagged)
    empty = np.empty(0, dtype=np.int64)
    out, table, count, _nfree, nxt, done = _insert(table, keys, query, count, empty, 0, 0, 2**31 - 1,
                                                   into=tagged == "into")
    slots = table[0]
    distinct = len(np.unique(query))
    assert done == len(query) and count == nxt == distinct
    assert out[-1000:].tolist() == out[:1000].tolist() and keys[out].tolist() == query.tolist()
    assert count * ht.LOAD_DEN <= len(slots) * ht.LOAD_NUM < 2 * count * ht.LOAD_DEN
