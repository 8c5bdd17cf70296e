"""The merge kernel against its reference: advanced, consolidated, fueled, exact sums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trie_strategies import Trie, as_rows, depths, kernels, rows, time

from ddflow.operators.kernels import lookup, merge, trie


def frontier(draw, depth: int) -> np.ndarray:
    elements = draw(st.lists(time(depth), max_size=3))
    return np.asarray(elements, dtype=np.int64).reshape(len(elements), depth)


def start(a: Trie, b: Trie) -> tuple[np.ndarray, int]:
    room = trie.size(a.nk + b.nk, a.nv + b.nv, a.n + b.n, a.depth)
    buf = np.full(merge.HEADER + room, -7, dtype=np.int64)  # garbage where nothing is written yet
    return buf, merge.begin(buf, *a.row, *b.row, a.depth)


def output(buf: np.ndarray, depth: int) -> list:
    """The packed result of a finished merge, as rows."""
    assert buf[merge.STATUS] == merge.DONE
    nk, nv, n = (int(x) for x in buf[[merge.OUT_KEYS, merge.OUT_VALS, merge.OUT_UPDATES]])
    body = buf[merge.HEADER : merge.HEADER + trie.size(nk, nv, n, depth)]
    ko, va, up, ri, end = trie.layout(nk, nv, n, depth)
    keys, key_offs = body[:ko], body[ko:va]
    vals, updates = body[va:up].reshape(-1, 2), body[up:ri].reshape(n, depth + 1)
    assert key_offs[nk] == nv and vals[nv].tolist() == [0, n], "closing rows"
    out = []
    for i in range(nk):
        assert key_offs[i] < key_offs[i + 1], "no key without vals"
        for v in range(key_offs[i], key_offs[i + 1]):
            assert vals[v, 1] < vals[v + 1, 1], "no val without updates"
            for r in range(vals[v, 1], vals[v + 1, 1]):
                out.append((int(keys[i]), int(vals[v, 0]), tuple(updates[r, :-1].tolist()), int(updates[r, -1])))
    assert len(out) == n
    assert body[ri:end].tolist() == trie.radix_reference(keys).tolist()
    return out


def reference(a: Trie, b: Trie, f: np.ndarray):
    try:
        return as_rows(merge.merge_reference(a.cols, b.cols, f))
    except OverflowError:
        return None


def key_sizes(a: Trie, b: Trie) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for t in (a, b):
        for k in t.cols[0].tolist():
            sizes[k] = sizes.get(k, 0) + 1
    return sizes


@kernels
@given(st.data())
def test_merge_at_once_and_in_pieces_equals_the_reference(data):
    d = data.draw(depths)
    huge = data.draw(st.booleans())
    a, b = Trie(data.draw(rows(d, huge=huge)), d), Trie(data.draw(rows(d, huge=huge)), d)
    f = frontier(data.draw, d)
    want = reference(a, b, f)

    whole, address = start(a, b)
    assert merge.work(np.asarray([address]), f, 10**18) == 1
    if want is None:
        assert whole[merge.STATUS] == merge.OVERFLOW
    else:
        assert output(whole, d) == want
        assert whole[merge.WORK] == a.n + b.n

    fuels = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    pieces, address = start(a, b)
    sizes = key_sizes(a, b)
    steps = 0
    while pieces[merge.STATUS] == merge.RUNNING:
        fuel = fuels[steps % len(fuels)]
        before, keys_before = int(pieces[merge.WORK]), (int(pieces[merge.POS_OLDER]), int(pieces[merge.POS_NEWER]))
        changed = merge.work(np.asarray([address]), f, fuel)
        read = int(pieces[merge.WORK]) - before
        if pieces[merge.STATUS] == merge.RUNNING:
            assert changed == 0
            largest = max(sizes.values(), default=0)
            assert fuel <= read < fuel + largest or (fuel <= 0 and read == 0), "stops at the first key boundary past the fuel"
            assert fuel <= 0 or (int(pieces[merge.POS_OLDER]), int(pieces[merge.POS_NEWER])) != keys_before
        else:
            assert changed == 1
        steps += 1
        assert steps <= 4 * (a.n + b.n) + 10
        if max(fuels) == 0 and steps > 3:  # no fuel ever: no progress
            break
    if max(fuels) > 0:
        if want is None:
            assert pieces[merge.STATUS] == merge.OVERFLOW
        else:
            assert output(pieces, d) == want


@kernels
@given(st.data())
def test_the_frontier_may_advance_between_steps(data):
    """Each key is advanced by the frontier of its step: the result has the accumulations of both
    frontiers' merges at every time beyond the later frontier."""
    d = 1
    a, b = Trie(data.draw(rows(d)), d), Trie(data.draw(rows(d)), d)
    early = data.draw(st.integers(0, 4))
    late = early + data.draw(st.integers(0, 4))
    buf, address = start(a, b)
    merge.work(np.asarray([address]), np.asarray([[early]], dtype=np.int64), data.draw(st.integers(1, 5)))
    merge.work(np.asarray([address]), np.asarray([[late]], dtype=np.int64), 10**18)
    got = output(buf, d)
    want = as_rows(merge.merge_reference(a.cols, b.cols, np.asarray([[late]], dtype=np.int64)))
    advanced = {}
    for k, v, t, x in got:
        at = (k, v, (max(t[0], late),))
        advanced[at] = advanced.get(at, 0) + x
    assert sorted((k, v, t, x) for (k, v, t), x in advanced.items() if x) == want
    assert all(t[0] >= early for _, _, t, _ in got)


def test_many_merges_step_in_one_call():
    tries = [Trie([(k, 0, (t,), 1) for k in range(5)], 1) for t in range(6)]
    merges = [start(tries[i], tries[i + 1]) for i in range(0, 6, 2)]
    table = np.asarray([address for _, address in merges], dtype=np.int64)
    f = np.asarray([[10]], dtype=np.int64)
    assert merge.work(table, f, 3) == 0
    assert merge.work(table, f, 100) == 3
    for buf, _ in merges:
        assert output(buf, 1) == [(k, 0, (10,), 2) for k in range(5)]
    assert merge.work(table, f, 100) == 0, "finished merges are left alone"


def test_sums_are_exact_across_wraps():
    """Diffs MAX, MAX, -MAX, -MAX at one time sum to zero although the running sum leaves int64."""
    big = 2**63 - 1
    a = Trie([(1, 1, (0,), big), (1, 1, (1,), big)], 1)
    b = Trie([(1, 1, (2,), -big), (1, 1, (3,), -big), (2, 2, (3,), 5)], 1)
    buf, address = start(a, b)
    merge.work(np.asarray([address]), np.asarray([[3]], dtype=np.int64), 100)
    assert output(buf, 1) == [(2, 2, (3,), 5)]
    over, address = start(Trie([(1, 1, (0,), big)], 1), Trie([(1, 1, (1,), 1)], 1))
    merge.work(np.asarray([address]), np.asarray([[1]], dtype=np.int64), 100)
    assert over[merge.STATUS] == merge.OVERFLOW and (over[merge.BAD_KEY], over[merge.BAD_VAL]) == (1, 1)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_large_histories_sort_by_time(depth):
    """Long histories whose advanced times interleave are sorted (the natural merge sort's many runs)."""
    rng = np.random.default_rng(depth)
    def rows_(n):
        times = {tuple(rng.integers(0, 50, depth).tolist()) for _ in range(n)}
        return sorted((7, 1, t, int(rng.choice([-1, 1]))) for t in times)
    a, b = Trie(rows_(500), depth), Trie(rows_(500), depth)
    f = rng.integers(0, 50, (2, depth)).astype(np.int64)
    buf, address = start(a, b)
    merge.work(np.asarray([address]), f, 10**9)
    assert output(buf, depth) == as_rows(merge.merge_reference(a.cols, b.cols, f))


def test_a_large_result_is_packed_with_its_radix_index():
    n = trie.INDEXED
    a = Trie([(2 * k, 0, (0,), 1) for k in range(n)], 1)
    b = Trie(sorted([(2 * k + 1, 0, (1,), 1) for k in range(n)] + [(0, 0, (1,), -1)]), 1)
    buf, address = start(a, b)
    merge.work(np.asarray([address]), np.asarray([[1]], dtype=np.int64), 10**9)
    rows_ = output(buf, 1)
    want = as_rows(merge.merge_reference(a.cols, b.cols, np.asarray([[1]], dtype=np.int64)))
    assert rows_ == want and len(want) == 2 * n - 1
    body = buf[merge.HEADER : merge.HEADER + trie.size(2 * n - 1, 2 * n - 1, 2 * n - 1, 1)]
    cols = tuple(np.asarray(c) for c in merge.merge_reference(a.cols, b.cols, np.asarray([[1]], dtype=np.int64)))
    assert body.tolist() == trie.build_reference(*cols).tolist()


def cascade_reference(tries: list[Trie], frontier: np.ndarray, fuel: int, ratio: int = 2):
    """:func:`merge.cascade` by merging with the reference: ``(count, rows, read)``."""
    merged, count, read = tries[-1].cols, 1, 0
    for older in reversed(tries[:-1]):
        n = len(merged[0])
        if (ratio > 0 and older.n > ratio * n) or read + older.n + n > fuel:
            break
        read += older.n + n
        merged = merge.merge_reference(older.cols, merged, frontier)
        count += 1
    return count, as_rows(merged), read


@kernels
@given(st.data())
def test_cascade_equals_merging_with_the_reference(data):
    d = data.draw(depths)
    huge = data.draw(st.booleans())
    tries = [Trie(data.draw(rows(d, max_size=8, huge=huge)), d) for _ in range(data.draw(st.integers(1, 5)))]
    f = frontier(data.draw, d)
    fuel = data.draw(st.integers(0, 40))
    ratio = data.draw(st.sampled_from((0, 1, 2)))
    table_ = np.asarray([t.row for t in tries], dtype=np.int64).reshape(len(tries), 4)
    try:
        want = cascade_reference(tries, f, fuel, ratio)
    except OverflowError:
        want = None
    room = trie.size(*(int(x) for x in table_[:, 1:].sum(axis=0)), d)
    out = np.full(room + 1, 7, dtype=np.int64)
    count, address, nk, nv, n, end, read = merge.cascade(table_, 0, len(tries), f, fuel, out[:room], ratio)
    if want is None:  # a merge the cascade makes has a sum outside int64
        assert count == -1
        return
    assert count == want[0]
    if count >= 2:
        buffer = out[:end]
        got = as_rows(lookup_all(buffer, nk, nv, n, d))
        assert (got, read) == (want[1], want[2])
        assert address == buffer.ctypes.data and end == trie.size(nk, nv, n, d)
        cols = (np.asarray(c) for c in lookup_all(buffer, nk, nv, n, d))
        assert buffer.tolist() == trie.build_reference(*cols).tolist()
    assert out[room] == 7  # nothing written past the room given


def lookup_all(buffer, nk, nv, n, d):
    return lookup.expand(buffer, nk, nv, n, d, 0, nk)


@pytest.mark.parametrize("seed", range(6))
def test_cascade_of_several_hundred_updates_equals_the_reference(seed):
    """Cascades of three and more tries of a few hundred updates: each merge reads the previous one's
    result, whose buffer must stay alive while it is read (a freed one is reused by the next merge's
    buffer of about the same size, which then overwrites its own input)."""
    rng = np.random.default_rng(seed)
    tries = []
    for step, n in enumerate((400, 200, 90, 210)):
        keys = rng.integers(0, 2_000, n)
        rows_ = sorted({(int(k), int(rng.integers(0, 5)), (step,), 1) for k in keys})
        tries.append(Trie(rows_, 1))
    f = np.asarray([[len(tries)]], dtype=np.int64)
    table_ = np.asarray([t.row for t in tries], dtype=np.int64)
    room = trie.size(*(int(x) for x in table_[:, 1:].sum(axis=0)), 1)
    want = cascade_reference(tries, f, 10**6)
    for _ in range(3):
        out = np.empty(room, dtype=np.int64)
        count, address, nk, nv, n, end, read = merge.cascade(table_, 0, len(tries), f, 10**6, out, 2)
        assert count == want[0] >= 3
        assert (as_rows(lookup_all(out[:end], nk, nv, n, 1)), read) == (want[1], want[2])
