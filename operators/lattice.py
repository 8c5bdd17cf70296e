"""Partially ordered times with a least upper bound (``join``) and greatest lower bound (``meet``).

Outer times are ``int`` nanoseconds. A time inside ``k`` nested loops is ``(t, i1, ..., ik)`` under the
product order: ``a <= b`` iff every coordinate of ``a`` is ``<=`` the same coordinate of ``b``.
``join`` is the coordinate-wise max and ``meet`` the coordinate-wise min.

Vectorized forms work on ``(n, d)`` int64 arrays, one row a time; scalar forms take ``int`` (``d == 1``)
or tuples, and :func:`to_array` / :func:`to_scalar` convert between the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

T_MIN = int(np.iinfo(np.int64).min)
T_MAX = int(np.iinfo(np.int64).max)

Time = int | tuple[int, ...]


def as_tuple(t: Time) -> tuple[int, ...]:
    """A scalar time as a tuple of coordinates."""
    return (int(t),) if isinstance(t, (int, np.integer)) else tuple(int(c) for c in t)


def to_scalar(row: Sequence[int]) -> Time:
    """A time row as the API shows it: an ``int`` at depth 1, a tuple inside loops."""
    return int(row[0]) if len(row) == 1 else tuple(int(c) for c in row)


def to_array(times: Iterable[Time], depth: int) -> np.ndarray:
    """Scalar times as an ``(n, depth)`` int64 array."""
    rows = [as_tuple(t) for t in times]
    if not rows:
        return np.empty((0, depth), dtype=np.int64)
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), depth)


def less_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise product order ``a <= b`` (broadcasting over leading axes)."""
    return np.all(a <= b, axis=-1)


def join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise least upper bound."""
    return np.maximum(a, b)


def meet(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise greatest lower bound."""
    return np.minimum(a, b)


def scalar_less_equal(a: Time, b: Time) -> bool:
    return all(x <= y for x, y in zip(as_tuple(a), as_tuple(b), strict=True))


def scalar_join(a: Time, b: Time) -> Time:
    return to_scalar([max(x, y) for x, y in zip(as_tuple(a), as_tuple(b), strict=True)])


def scalar_meet(a: Time, b: Time) -> Time:
    return to_scalar([min(x, y) for x, y in zip(as_tuple(a), as_tuple(b), strict=True)])


def lex_order(times: np.ndarray) -> np.ndarray:
    """Indices sorting rows lexicographically: a linear extension of the product order."""
    if times.shape[1] == 1:
        return np.argsort(times[:, 0], kind="stable")
    return np.lexsort(times.T[::-1])
