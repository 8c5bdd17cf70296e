"""intern against a synchronous simulation of the collision rounds; ids unique and stable."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators import Dataflow
from ddflow.operators.tuning import EngineConfig
from ddflow.operators.library import StableHashModulo, _intern_rounds, intern, stable_hash
from ddflow.operators.nodes.intern import Intern
from library_reference import interned
from library_streams import check_stream, streams


def tiny_hash(pair: tuple) -> int:
    """24 ids for at most 16 distinct records: collisions in most steps, chains of rounds."""
    return int.from_bytes(hashlib.blake2b(repr(pair).encode(), digest_size=8).digest(), "little") % 24


def test_tiny_hash_collides():
    # the collision rounds are exercised: the 16 records collide at round zero
    assert len({tiny_hash((0, r)) for r in range(16)}) < 16
    assert any(i != tiny_hash((0, r)) for r, i in interned({r: 1 for r in range(16)}, tiny_hash))


def unique_ids(result: dict, t: int) -> None:
    ids = [i for (_record, i) in result]
    assert len(ids) == len(set(ids)), f"duplicate ids at {t}: {sorted(result)}"
    records = [r for (r, _i) in result]
    assert len(records) == len(set(records)), f"a record with two ids at {t}: {sorted(result)}"


@pytest.mark.usefixtures("workers")  # with 1, 2 and 3 workers
@given(streams({"records": st.integers(0, 15)}, initial=16, max_changes=40))
def test_intern_matches_collision_rounds(stream):
    check_stream(stream, lambda c: intern(c, hasher=tiny_hash), lambda s: interned(s, tiny_hash),
                 extra=unique_ids)


@pytest.mark.usefixtures("workers")  # with 1, 2 and 3 workers
@given(streams({"records": st.integers(0, 15)}, initial=16, max_changes=40))
def test_intern_ids_are_stable_without_collisions(stream):
    """With the 63-bit default hash every record keeps the id of its round-zero pair while present."""

    def reference(snapshot):
        return {(r, stable_hash((0, r))): c for r, c in snapshot.items()}

    check_stream(stream, intern, reference, extra=unique_ids)


@pytest.mark.usefixtures("workers")  # with 1, 2 and 3 workers
@given(streams({"records": st.text("abc", max_size=2)}, initial=10, max_changes=20))
def test_intern_strings(stream):
    # at most 13 distinct strings for 24 ids: the rounds always find free ids
    check_stream(stream, lambda c: intern(c, hasher=lambda p: stable_hash(p) % 24),
                 lambda s: interned(s, lambda p: stable_hash(p) % 24), extra=unique_ids)


def test_intern_evicts_and_reinstates_a_winner():
    """Records 0 and 1 collide (hash range 1 at round 0): 1 moves to round 1; removing 0 brings it back."""

    def hasher(pair):
        round_, record = pair
        return 0 if round_ == 0 else 100 + round_

    df = Dataflow()
    records = df.new_input()
    probe = intern(records.collection, hasher=hasher).capture()
    records.insert(0, 10)
    records.insert(1, 10)
    records.insert(2, 10)
    records.remove(0, 20)
    records.advance_to(30)
    df.run()
    assert probe.at(10) == {(0, 0): 1, (1, 101): 1, (2, 102): 1}
    assert probe.at(20) == {(1, 0): 1, (2, 101): 1}


def test_stable_hash_does_not_depend_on_the_process():
    values = [(0, "abc"), (3, 17), (1, (2, "x", b"y")), (0, 1.5), (0, None)]
    code = ("from ddflow.operators.library import stable_hash; "
            f"print([stable_hash(v) for v in {values!r}])")
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert outs == {f"{[stable_hash(v) for v in values]}\n"}
    assert all(0 <= stable_hash(v) < 2**63 for v in values)


# -- the compiled operator (stable_hash, or stable_hash modulo m, in a single-worker outer scope) ------
def test_the_default_hasher_runs_the_compiled_operator():
    df = Dataflow()
    records = df.new_input()
    intern(records.collection).capture()
    assert any(isinstance(node, Intern) for node in df.root.nodes)
    assert not any(node.scope is not df.root for node in df._all_nodes()), "no loop: one operator"


@given(streams({"records": st.integers(0, 15)}, initial=16, max_changes=40), st.integers(17, 40))
def test_compiled_intern_matches_collision_rounds(stream, modulus):
    """A small modulus (above the 16 records: the rounds end): groups collide, rounds land on the hashes of lone records (watched groups)."""
    hasher = StableHashModulo(modulus)
    check_stream(stream, lambda c: intern(c, hasher=hasher), lambda s: interned(s, hasher), extra=unique_ids)


@given(streams({"records": st.tuples(st.text("abc", max_size=2), st.integers(0, 3))}, initial=10, max_changes=30),
       st.integers(41, 64))  # at most 40 records
def test_compiled_intern_of_strings_and_pairs(stream, modulus):
    hasher = StableHashModulo(modulus)
    check_stream(stream, lambda c: intern(c, hasher=hasher), lambda s: interned(s, hasher), extra=unique_ids)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 30), st.sampled_from([-2, -1, 1, 1, 2])),
                max_size=60),
       st.lists(st.integers(1, 31), max_size=5), st.integers(13, 30), st.sampled_from(["nodes", "plan"]))
def test_compiled_intern_with_negative_multiplicities(updates, cuts, modulus, executor):
    """Arbitrary signed diffs (negative multiplicities present), many times per epoch: the compiled
    operator, the loop of reductions and the synchronous rounds agree at every time, with either
    executor. Ids are given back after every run (the operator's groups keep theirs)."""
    hasher = StableHashModulo(modulus)
    df = Dataflow(config=EngineConfig(sweep_growth=1, sweep_min_ids=1, executor=executor))
    records = df.new_input()
    compiled = intern(records.collection, hasher=hasher).capture()
    loop = _intern_rounds(records.collection, hasher).capture()
    boundaries = sorted(set(cuts)) + [32]
    done = 0
    for b in boundaries:
        for record, t, diff in updates:
            if done <= t < b:
                records.update(record, t, diff)
        records.advance_to(b)
        df.run()
        done = b
    for t in range(31):
        snapshot = {}
        for record, s, diff in updates:
            if s <= t:
                snapshot[record] = snapshot.get(record, 0) + diff
        want = interned({r: c for r, c in snapshot.items() if c}, hasher)
        assert compiled.at(t) == want == loop.at(t), t


def test_intern_grows_the_id_columns_once_for_hashes_and_pairs(monkeypatch):
    """A batch of new ints: the input's ids grow the id columns once, and the node reserves room for
    the hashes (and the output pairs, when a consumer needs pair ids) in one more grow (each grow
    copies the columns)."""
    from ddflow.operators.values.ids import IdSpace

    resizes = []
    resize = IdSpace._resize
    monkeypatch.setattr(IdSpace, "_resize", lambda self, size: (resizes.append(size), resize(self, size)))
    n = 5000
    df = Dataflow()
    records = df.new_input("records")
    probe = intern(records.collection).capture(history=False)
    records.update_many(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
    records.close()
    df.run()
    out = probe.drain()
    assert sorted(r for (r, _i), _t, _d in out) == list(range(n))
    assert {i for (r, i), _t, _d in out} == {stable_hash((0, r)) for r in range(n)}
    assert len([s for s in resizes if s >= n]) == 2, resizes


def test_reserve_keeps_ids_and_spares_later_grows():
    from ddflow.operators.values.ids import INT, IdSpace

    keys = np.arange(1000, dtype=np.int64) * 7919
    plain, reserved = IdSpace(), IdSpace()
    reserved.reserve(3000)
    columns = reserved.kinds
    got = []
    for space in (plain, reserved):
        ids = [space.intern(space.ints, INT, keys), space.intern(space.ints, INT, keys + 1)]
        assert np.array_equal(space.intern(space.ints, INT, keys), ids[0])
        got.append(ids)
    assert all(np.array_equal(a, b) for a, b in zip(*got))
    assert reserved.kinds is columns and len(columns) == 3000
    reserved.reserve(10)  # room enough: nothing grows
    assert reserved.kinds is columns


def test_compiled_intern_reports_its_groups_slice_by_slice(monkeypatch):
    """The operator reports the ids its groups hold a few groups at a time. Its output is drained
    every run, so after a full retraction only the operator holds its hashes' ids: a group reported
    wrongly would lose its id to a new record's, and the records that come back would get wrong ids."""
    from ddflow.operators.nodes import intern as node

    monkeypatch.setattr(node, "_HELD_SLICE", 3)
    hasher = StableHashModulo(43)
    df = Dataflow(config=EngineConfig(sweep_growth=1, sweep_min_ids=1))
    records = df.new_input()
    probe = intern(records.collection, hasher=hasher).capture(history=False)
    counts: dict[int, int] = {}
    state: dict[tuple, int] = {}
    old = list(range(15))
    for t, batch in enumerate([[(r, 1) for r in old], [(r, -1) for r in old], [(r, 1) for r in range(100, 115)],
                               [(r, 1) for r in old], [(3, -1), (101, -1), (7, 2)]]):
        for record, diff in batch:
            records.update(record, t, diff)
            counts[record] = counts.get(record, 0) + diff
        records.advance_to(t + 1)
        df.run()
        for pair, _time, diff in probe.drain():
            state[pair] = state.get(pair, 0) + diff
        assert df.interner.sweeps == t + 1  # every run ends with a sweep that asks the node what it holds
        assert {p: c for p, c in state.items() if c} == interned({r: c for r, c in counts.items() if c}, hasher), t


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 6), st.sampled_from([-1, 1, 1, 2])), max_size=40),
       st.integers(13, 30), st.sampled_from(["nodes", "plan"]))
def test_compiled_intern_output_as_columns_and_as_pair_ids(updates, modulus, executor):
    """The operator hands a capture its ``(record, id)`` output as two id columns, and other consumers
    pair ids: a capture fed directly, one fed through a map (pair ids), and one fed by a concat of the
    operator and another collection (columns and record ids in one capture) agree with the loop of
    reductions at every time, after sweeps that ask each capture for the columns it holds."""
    hasher = StableHashModulo(modulus)
    df = Dataflow(config=EngineConfig(sweep_growth=1, sweep_min_ids=1, executor=executor))
    records = df.new_input()
    other = df.new_input()
    interned_ = intern(records.collection, hasher=hasher)
    direct = interned_.capture()
    mapped = interned_.map(lambda pair: pair).capture()
    mixed = interned_.concat(other.collection).capture()
    loop = _intern_rounds(records.collection, hasher)
    loop_direct = loop.capture()
    loop_mixed = loop.concat(other.collection).capture()
    for t in range(7):
        for record, s, diff in updates:
            if s == t:
                records.update(record, t, diff)
        other.update((100 + t, t), t, 1)
        records.advance_to(t + 1)
        other.advance_to(t + 1)
        df.run()
        assert direct.at(t) == mapped.at(t) == loop_direct.at(t), t
        assert mixed.at(t) == loop_mixed.at(t), t
    assert df.interner.sweeps == 7


def test_compiled_intern_drains_int_records_as_columns():
    """A capture of the operator drains ``(record, id)`` of int records (ids below ``2**62``) as an
    ``(n, 2)`` int column, with no pair id interned for the output."""
    from ddflow.operators.values.interner import Interner

    hasher = StableHashModulo(1 << 40)
    df = Dataflow()
    records = df.new_input()
    probe = intern(records.collection, hasher=hasher).capture(history=False)
    records.update_many(np.arange(5000, dtype=np.int64), np.zeros(5000, dtype=np.int64), np.ones(5000, dtype=np.int64))
    records.close()
    df.run()
    assert df.interner.stats()["pair_capacity"] == Interner().stats()["pair_capacity"]  # the pairs' table never grew
    columns, times, diffs = probe.drain_columns()
    assert columns.shape == (5000, 2) and (diffs == 1).all() and (times == 0).all()
    assert {tuple(row) for row in columns.tolist()} == set(interned({r: 1 for r in range(5000)}, hasher))
