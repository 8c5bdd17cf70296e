"""Brute-force oracles and hypothesis strategies for the data-plane tests.

Times are drawn with every coordinate in ``[0, R]``. For such times and frontiers, two times are told
apart by some time beyond a frontier iff they are told apart by a time of the grid ``[0, R]^d`` beyond
it (clamp each coordinate of the separating time to ``R``), so the oracles only look at the grid.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from ddflow.operators.frontier import Antichain
from ddflow.operators.traces.batch import Updates

R = 4  # coordinates of drawn times are in [0, R]

dataplane = settings(deadline=None, max_examples=100)  # per test: never a global profile


def grid(depth: int) -> list[tuple[int, ...]]:
    """Every time of ``[0, R]^depth``."""
    return list(itertools.product(range(R + 1), repeat=depth))


def le(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def minimal(times: list[tuple[int, ...]]) -> set[tuple[int, ...]]:
    """The minimal elements of a set of times, by brute force."""
    distinct = set(times)
    return {t for t in distinct if not any(u != t and le(u, t) for u in distinct)}


def beyond(frontier: list[tuple[int, ...]] | Antichain, time: tuple[int, ...]) -> bool:
    return any(le(f, time) for f in frontier)


def rows(u: Updates) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """``(data, time, diff)`` per update, as Python tuples."""
    data = list(zip(*(c.tolist() for c in u.data), strict=True)) if u.data else [()] * len(u)
    times = [tuple(t) for t in u.times.tolist()]
    return list(zip(data, times, u.diffs.tolist(), strict=True))


def accumulation(u: Updates, at: tuple[int, ...]) -> dict[tuple[int, ...], int]:
    """The collection at time ``at``: per record, the sum of diffs at times ``<= at``; zeros absent."""
    acc: dict[tuple[int, ...], int] = defaultdict(int)
    for data, time, diff in rows(u):
        if le(time, at):
            acc[data] += diff
    return {d: c for d, c in acc.items() if c != 0}


def assert_same_accumulations(got: Updates, want: Updates, at: list[tuple[int, ...]], what: str) -> None:
    for s in at:
        assert accumulation(got, s) == accumulation(want, s), f"{what}: accumulations differ at time {s}"


def make_updates(data: list[tuple[int, ...]], times: list[tuple[int, ...]], diffs: list[int], width: int, depth: int) -> Updates:
    n = len(diffs)
    cols = tuple(np.asarray([d[i] for d in data], dtype=np.int64).reshape(n) for i in range(width))
    return Updates(cols, np.asarray(times, dtype=np.int64).reshape(n, depth), np.asarray(diffs, dtype=np.int64))


# -- strategies ----------------------------------------------------------------------------------

depths = st.integers(min_value=1, max_value=3)


def times(depth: int) -> st.SearchStrategy[tuple[int, ...]]:
    return st.tuples(*[st.integers(0, R)] * depth)


def antichains(depth: int, max_size: int = 3) -> st.SearchStrategy[Antichain]:
    return st.lists(times(depth), max_size=max_size).map(Antichain)


@st.composite
def updates(draw, depth: int, width: int = 2, max_size: int = 40, data_range: int = 3, diffs=None) -> Updates:
    """Updates with ``width`` small int data columns, times in the grid, diffs in [-2, 2] (zeros too)."""
    n = draw(st.integers(0, max_size))
    data = draw(st.lists(st.tuples(*[st.integers(0, data_range)] * width), min_size=n, max_size=n))
    ts = draw(st.lists(times(depth), min_size=n, max_size=n))
    ds = draw(st.lists(diffs if diffs is not None else st.integers(-2, 2), min_size=n, max_size=n))
    return make_updates(data, ts, ds, width, depth)


def advance_frontier(old: Antichain, candidates: list[tuple[int, ...]]) -> Antichain:
    """A frontier at or after ``old``: each candidate joined with an element of ``old``."""
    elements = old.elements
    if not elements:
        return Antichain()
    return Antichain(
        tuple(max(x, y) for x, y in zip(c, elements[i % len(elements)], strict=True)) for i, c in enumerate(candidates)
    )


def accumulation_table(u: Updates, at: list[tuple[int, ...]]) -> dict[tuple[int, ...], dict[tuple[int, ...], int]]:
    """``{time: accumulation(u, time)}`` for many times at once (numpy broadcasting, same definition)."""
    if not at:
        return {}
    points = np.asarray(at, dtype=np.int64)
    records = list(zip(*(c.tolist() for c in u.data), strict=True)) if len(u) else []
    index: dict[tuple[int, ...], int] = {}
    column = np.asarray([index.setdefault(r, len(index)) for r in records], dtype=np.int64)
    le_mask = np.all(u.times[None, :, :] <= points[:, None, :], axis=2)  # (times, updates)
    weights = np.zeros((len(u), len(index)), dtype=np.int64)
    weights[np.arange(len(u)), column] = u.diffs
    acc = le_mask.astype(np.int64) @ weights
    names = list(index)
    return {s: {names[j]: int(acc[i, j]) for j in np.flatnonzero(acc[i]).tolist()} for i, s in enumerate(at)}
