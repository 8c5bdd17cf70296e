"""Lattice times, antichains, counted antichains and ``advance_by`` against brute-force definitions."""

from __future__ import annotations

import numpy as np
import pytest
from dataplane_oracle import (
    R,
    accumulation,
    antichains,
    beyond,
    dataplane,
    depths,
    grid,
    le,
    minimal,
    times,
    updates,
)
from hypothesis import given
from hypothesis import strategies as st

from ddflow.operators import lattice
from ddflow.operators.frontier import Antichain, MutableAntichain, advance_by
from ddflow.operators.traces.batch import consolidate


def arr(ts: list[tuple[int, ...]], depth: int) -> np.ndarray:
    return np.asarray(ts, dtype=np.int64).reshape(len(ts), depth)


# -- lattice -------------------------------------------------------------------------------------


@dataplane
@given(st.data())
def test_join_and_meet_are_least_upper_and_greatest_lower_bounds(data):
    d = data.draw(depths)
    pairs = data.draw(st.lists(st.tuples(times(d), times(d)), min_size=1, max_size=10))
    a, b = arr([p[0] for p in pairs], d), arr([p[1] for p in pairs], d)
    j, m = lattice.join(a, b), lattice.meet(a, b)
    for (x, y), jr, mr in zip(pairs, j.tolist(), m.tolist(), strict=True):
        jr, mr = tuple(jr), tuple(mr)
        upper = [c for c in grid(d) if le(x, c) and le(y, c)]
        lower = [c for c in grid(d) if le(c, x) and le(c, y)]
        assert jr in upper and all(le(jr, c) for c in upper)
        assert mr in lower and all(le(c, mr) for c in lower)
        assert lattice.to_scalar(jr) == lattice.scalar_join(lattice.to_scalar(x), lattice.to_scalar(y))
        assert lattice.to_scalar(mr) == lattice.scalar_meet(lattice.to_scalar(x), lattice.to_scalar(y))
    want = [le(x, y) for x, y in pairs]
    assert lattice.less_equal(a, b).tolist() == want
    assert [lattice.scalar_less_equal(lattice.to_scalar(x), lattice.to_scalar(y)) for x, y in pairs] == want


@dataplane
@given(st.data())
def test_lex_order_is_a_linear_extension_of_the_product_order(data):
    d = data.draw(depths)
    ts = data.draw(st.lists(times(d), max_size=20))
    order = lattice.lex_order(arr(ts, d)).tolist()
    assert sorted(order) == list(range(len(ts)))
    seq = [ts[i] for i in order]
    for i in range(len(seq)):
        for k in range(i + 1, len(seq)):
            assert not (le(seq[k], seq[i]) and seq[k] != seq[i]), f"{seq[k]} < {seq[i]} sorted after it"


def test_scalar_forms_round_trip():
    assert lattice.to_scalar([5]) == 5 and lattice.as_tuple(5) == (5,)
    assert lattice.to_scalar([1, 2]) == (1, 2) and lattice.as_tuple((1, 2)) == (1, 2)
    a = lattice.to_array([3, 1], 1)
    assert a.shape == (2, 1) and a.dtype == np.int64 and a[:, 0].tolist() == [3, 1]
    assert lattice.to_array([], 2).shape == (0, 2)
    assert lattice.to_array([(1, 2), (3, 4)], 2).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ValueError):
        lattice.scalar_join((1, 2), (1, 2, 3))  # depths must agree


# -- Antichain -----------------------------------------------------------------------------------


@dataplane
@given(st.data())
def test_antichain_insert_keeps_exactly_the_minimal_elements(data):
    d = data.draw(depths)
    ts = data.draw(st.lists(times(d), max_size=12))
    a = Antichain()
    for i, t in enumerate(ts):
        inserted = a.insert(lattice.to_scalar(t))
        assert inserted == (not beyond(ts[:i], t)), f"insert({t}) after {ts[:i]} returned {inserted}"
        assert set(a.elements) == minimal(ts[: i + 1])
    assert len(a) == len(minimal(ts))
    assert a == Antichain(reversed(ts)) and hash(a) == hash(Antichain(reversed(ts)))
    assert a.is_empty() == (not ts)
    g = grid(d)
    assert [a.less_equal(s) for s in g] == [beyond(ts, s) for s in g]
    assert a.beyond(arr(g, d)).tolist() == [beyond(ts, s) for s in g]
    assert a.array(d).shape == (len(a), d)


@dataplane
@given(st.data())
def test_antichain_meet_is_the_lower_envelope_and_dominates_is_inclusion(data):
    d = data.draw(depths)
    a, b = data.draw(antichains(d)), data.draw(antichains(d))
    m = a.meet(b)
    assert set(m.elements) == minimal(a.elements + b.elements)
    for s in grid(d):
        assert m.less_equal(s) == (a.less_equal(s) or b.less_equal(s))
    # a.dominates(b): everything beyond b is beyond a
    assert a.dominates(b) == all(a.less_equal(s) for s in grid(d) if b.less_equal(s))
    assert m.dominates(a) and m.dominates(b)


# -- MutableAntichain ----------------------------------------------------------------------------


@dataplane
@given(st.data())
def test_mutable_antichain_frontier_is_minimal_of_positive_counts(data):
    d = data.draw(depths)
    ops = data.draw(st.lists(st.tuples(times(d), st.integers(-2, 3)), max_size=30))
    m = MutableAntichain()
    counts: dict[tuple[int, ...], int] = {}
    for t, delta in ops:
        if counts.get(t, 0) + delta < 0:
            with pytest.raises(ValueError, match="negative"):
                m.update(t, delta)
            return  # the structure is not usable after a refused update
        m.update(lattice.to_scalar(t), delta)
        counts[t] = counts.get(t, 0) + delta
        positive = [u for u, c in counts.items() if c > 0]
        assert set(m.frontier().elements) == minimal(positive)
        assert m.is_empty() == (not positive)


def test_mutable_antichain_counts_holders():
    m = MutableAntichain()
    f1, f2 = Antichain([(1, 5)]), Antichain([(3, 2), (1, 5)])
    m.update_frontier(None, f1)
    m.update_frontier(None, f2)
    assert m.frontier() == Antichain([(1, 5), (3, 2)])
    m.update_frontier(f2, Antichain([(4, 4)]))  # second holder advances: (1, 5) still held by the first
    assert m.frontier() == Antichain([(1, 5), (4, 4)])
    m.update_frontier(f1, None)  # first holder leaves
    assert m.frontier() == Antichain([(4, 4)])
    m.update_frontier(Antichain([(4, 4)]), None)
    assert m.is_empty() and m.frontier().is_empty()


@dataplane
@given(st.data())
def test_mutable_antichain_holders_moving_on_keep_the_frontier_of_what_they_hold(data):
    """Holders replace their frontiers (one time for another is the readers' common case); the
    frontier is always the minimal held times, and releasing a time nobody holds changes nothing."""
    d = data.draw(depths)
    m = MutableAntichain()
    held = [data.draw(antichains(d)) for _ in range(data.draw(st.integers(1, 3)))]
    for f in held:
        m.update_frontier(None, f)
    for _ in range(data.draw(st.integers(0, 8))):
        i = data.draw(st.integers(0, len(held) - 1))
        new = data.draw(st.one_of(antichains(d), st.builds(lambda t: Antichain([t]), times(d))))
        m.update_frontier(held[i], new)
        held[i] = new
        want = minimal([t for f in held for t in f.elements])
        got = m.frontier()
        assert set(got.elements) == want and got == Antichain(want)
        for s in grid(d):  # the frontier's one-time shortcut agrees with the definition
            one = Antichain([s])
            assert got.dominates(one) == any(le(e, s) for e in want)
    stranger = Antichain([(R + 1,) * d])  # a time no holder holds
    before = set(m.frontier().elements)
    with pytest.raises(ValueError, match="negative"):
        m.update_frontier(stranger, Antichain([(0,) * d]))
    assert set(m.frontier().elements) == before


# -- advance_by ----------------------------------------------------------------------------------


@dataplane
@given(st.data())
def test_advance_by_keeps_order_against_every_time_beyond_the_frontier(data):
    d = data.draw(depths)
    f = data.draw(antichains(d))
    ts = data.draw(st.lists(times(d), min_size=1, max_size=20))
    adv = [tuple(r) for r in advance_by(arr(ts, d), f).tolist()]
    future = [s for s in grid(d) if f.less_equal(s)]
    for t, a in zip(ts, adv, strict=True):
        if not f.is_empty():  # the formula itself: meet over f of join(t, f)
            assert a == tuple(min(max(x, y) for y in col) for x, col in zip(t, zip(*f.elements), strict=True))
        else:
            assert a == t
        assert le(t, a), "advancing never moves a time backwards"
        if f.less_equal(t):
            assert a == t, f"{t} is beyond {f} and must be left as it is"
        for s in future:
            assert le(t, s) == le(a, s), f"advance({t}) = {a} compares differently to {s} beyond {f}"
    if f.is_empty():
        return  # nothing is beyond the empty frontier: times are left as they are (documented)
    for (t1, a1) in zip(ts, adv, strict=True):
        for (t2, a2) in zip(ts, adv, strict=True):
            same = all(le(t1, s) == le(t2, s) for s in future)
            assert (a1 == a2) == same, f"{t1}->{a1}, {t2}->{a2}, indistinguishable beyond {f}: {same}"


@dataplane
@given(st.data())
def test_advance_then_consolidate_keeps_accumulations_beyond_the_frontier(data):
    d = data.draw(depths)
    f = data.draw(antichains(d))
    u = data.draw(updates(d, width=1))
    compact = consolidate(u.advance_by(f))
    for s in grid(d):
        if f.less_equal(s):
            assert accumulation(compact, s) == accumulation(u, s), f"at {s} beyond {f}"
    if len(f) == 1 and not f.is_empty():  # one element: every time collapses onto a time beyond f
        assert f.beyond(compact.times).all()


def test_advance_by_collapses_a_window_onto_the_frontier():
    f = Antichain([(10, 0)])
    t = np.asarray([[1, 0], [5, 0], [9, 0], [10, 0], [12, 3]], dtype=np.int64)
    assert advance_by(t, f).tolist() == [[10, 0], [10, 0], [10, 0], [10, 0], [12, 3]]
    two = Antichain([(0, 2), (2, 0)])
    assert advance_by(np.asarray([[0, 0], [1, 1], [3, 0]]), two).tolist() == [[0, 0], [1, 1], [3, 0]]
    assert advance_by(np.asarray([[0, 0], [R, 0]]), Antichain([(1, 1)])).tolist() == [[1, 1], [R, 1]]


@dataplane
@given(st.data())
def test_trace_holds_are_the_meet_of_the_held_frontiers(data):
    """A trace's reader holds (``traces.handle.Holds``): readers arrive, move and leave; the frontier is
    the minimal elements of everything held, the same object as a reader's when all stand there."""
    from ddflow.operators.traces.handle import Holds

    d = data.draw(depths)
    holds, held = Holds(), []
    for _ in range(data.draw(st.integers(1, 12))):
        action = data.draw(st.sampled_from(["arrive", "move", "leave"] if held else ["arrive"]))
        if action == "arrive":
            f = data.draw(antichains(d))
            holds.update_frontier(None, f)
            held.append(f)
        else:
            i = data.draw(st.integers(0, len(held) - 1))
            new = data.draw(antichains(d)) if action == "move" else None
            holds.update_frontier(held[i], new)
            if new is None:
                held.pop(i)
            else:
                held[i] = new
        frontier = holds.frontier()
        assert set(frontier.elements) == minimal([t for f in held for t in f.elements])
        assert holds.is_empty() == (not any(f.elements for f in held))
        if held and all(f == held[0] for f in held):
            assert frontier == held[0]
    with pytest.raises(ValueError, match="no reader holds"):
        holds.update_frontier(Antichain([(R + 1,) * d]), None)
