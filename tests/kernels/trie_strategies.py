"""Hypothesis strategies for kernels on tries: consolidated keyed updates with edge cases.

Values are drawn from small ranges (so keys, vals and times collide) mixed with int64 extremes; times
have 1-3 coordinates; diffs are non-zero, sometimes near the int64 limits.
"""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from ddflow.operators.kernels import trie

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

kernels = settings(deadline=None, max_examples=200)  # per test: never a global profile

depths = st.integers(1, 3)
ints = st.one_of(st.integers(0, 4), st.sampled_from([I64_MIN, I64_MIN + 1, -1, I64_MAX - 1, I64_MAX]))
small_diffs = st.integers(-3, 3).filter(bool)
huge_diffs = st.sampled_from([I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1, 2**62, -(2**62)])


def time(depth: int):
    return st.tuples(*[ints] * depth)


@st.composite
def rows(draw, depth: int, max_size: int = 12, huge: bool = False):
    """Consolidated ``(key, val, time, diff)`` rows, sorted, no (key, val, time) repeated."""
    diffs = st.one_of(small_diffs, huge_diffs) if huge else small_diffs
    shape = draw(st.sampled_from(["random", "random", "random", "empty", "one", "equal"]))
    if shape == "empty":
        return []
    n = 1 if shape == "one" else draw(st.integers(0, max_size))
    drawn = draw(st.lists(st.tuples(ints, ints, time(depth), diffs), min_size=n, max_size=n))
    if shape == "equal" and drawn:  # all rows alike: one (key, val, time) survives
        drawn = drawn[:1]
    unique = {(k, v, t): x for k, v, t, x in drawn}
    return sorted((k, v, t, x) for (k, v, t), x in unique.items())


def columns(rows_: list, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, vals, times, diffs)`` int64 columns of rows."""
    n = len(rows_)
    return (
        np.asarray([r[0] for r in rows_], dtype=np.int64).reshape(n),
        np.asarray([r[1] for r in rows_], dtype=np.int64).reshape(n),
        np.asarray([r[2] for r in rows_], dtype=np.int64).reshape(n, depth),
        np.asarray([r[3] for r in rows_], dtype=np.int64).reshape(n),
    )


def as_rows(cols) -> list[tuple[int, int, tuple[int, ...], int]]:
    keys, vals, times, diffs = cols
    return [(k, v, tuple(t), x) for k, v, t, x in zip(keys.tolist(), vals.tolist(), times.tolist(), diffs.tolist(),
                                                    strict=True)]


class Trie:
    """A trie buffer built by the kernel, kept alive with its sizes and flat columns."""

    def __init__(self, rows_: list, depth: int) -> None:
        self.cols = columns(rows_, depth)
        self.buffer, self.address, self.nk, self.nv = trie.build(*self.cols)
        self.n = len(rows_)
        self.depth = depth

    @property
    def row(self) -> tuple[int, int, int, int]:
        return self.address, self.nk, self.nv, self.n


def table(tries: list[Trie]) -> np.ndarray:
    return np.asarray([t.row for t in tries], dtype=np.int64).reshape(len(tries), 4)
