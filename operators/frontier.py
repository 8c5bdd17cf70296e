"""Frontiers: antichains of times that bound which times may still receive updates.

A time ``t`` is *beyond* a frontier ``F`` when ``t >= f`` for some ``f`` in ``F``; such times may still
change. Times not beyond ``F`` are *complete*. The empty antichain is the frontier of a closed stream:
nothing is beyond it, everything is complete.

``Antichain`` keeps only minimal elements; the meet of antichains is the lower envelope of their union.
``MutableAntichain`` counts holds (e.g. readers' compaction frontiers) and exposes the frontier of the
times with positive count.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import numpy as np

from . import lattice
from .errors import CompactionError
from .lattice import Time, as_tuple


def _le(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Product order on coordinate tuples of equal length."""
    return all(map(operator.le, a, b))


class Antichain:
    """A set of mutually incomparable times (tuples); inserting keeps only the minimal ones."""

    __slots__ = ("_elements", "_array", "_one")

    def __init__(self, elements: Iterable[Time] = ()) -> None:
        self._elements: list[tuple[int, ...]] = []
        self._array: np.ndarray | None = None  # array() of the elements, kept until they change
        self._one: int | None = None  # the coordinate of a frontier of one 1-dimensional time, else None
        for e in elements:
            self.insert(e)

    def insert(self, time: Time) -> bool:
        """Insert ``time`` unless some element is ``<=`` it; drop elements it dominates."""
        t = time if type(time) is tuple else as_tuple(time)
        self._array = None
        if not self._elements:  # the common frontier of one time
            self._elements.append(t)
            self._one = t[0] if len(t) == 1 else None
            return True
        if any(_le(e, t) for e in self._elements):
            return False
        self._elements = [e for e in self._elements if not _le(t, e)]
        self._elements.append(t)
        self._one = t[0] if len(t) == 1 and len(self._elements) == 1 else None
        return True

    @property
    def elements(self) -> list[tuple[int, ...]]:
        """The antichain's times, as tuples, in a canonical order."""
        return sorted(self._elements)

    def less_equal(self, time: Time) -> bool:
        """True when ``time`` is beyond the frontier (``>=`` some element)."""
        t = time if type(time) is tuple else as_tuple(time)
        return any(_le(e, t) for e in self._elements)

    def dominates(self, other: Antichain) -> bool:
        """True when every element of ``other`` is beyond ``self`` (``self <= other`` as frontiers)."""
        a = self._one
        if a is not None:  # one 1-dimensional time each: compare them as ints
            b = other._one
            if b is not None:
                return a <= b
        mine, theirs = self._elements, other._elements
        if len(mine) == 1 and len(theirs) == 1:  # one time each: compare them
            a, b = mine[0], theirs[0]
            return a <= b if len(a) == 1 else _le(a, b)
        return all(self.less_equal(e) for e in theirs)

    def meet(self, other: Antichain) -> Antichain:
        """The lower envelope of the union: the frontier that holds back what either holds back."""
        return Antichain([*self._elements, *other._elements])

    def beyond(self, times: np.ndarray) -> np.ndarray:
        """Vectorized: mask of rows of an ``(n, d)`` array that are beyond the frontier."""
        n = len(times)
        if not self._elements or n == 0:
            return np.zeros(n, dtype=bool)
        if n == 1:  # one row (common at one change per epoch): compared as a tuple, no array passes
            t = tuple(times[0].tolist())
            return np.array([any(_le(e, t) for e in self._elements)])
        mask = np.zeros(n, dtype=bool)
        columns = [times[:, j] for j in range(times.shape[1])]
        for e in self._elements:
            inside = columns[0] >= e[0]
            for c, x in zip(columns[1:], e[1:]):
                inside &= c >= x
            mask |= inside
        return mask

    def array(self, depth: int) -> np.ndarray:
        """The times as an ``(n, depth)`` int64 array (read-only; the same array while the elements stay)."""
        a = self._array
        if a is None or a.shape[1] != depth:
            a = self._array = lattice.to_array(self._elements, depth)
            a.flags.writeable = False
        return a

    def is_empty(self) -> bool:
        """True when the antichain holds no time (nothing may change any more)."""
        return not self._elements

    def __iter__(self):
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Antichain):
            return False
        if self._one is not None and other._one is not None:
            return self._one == other._one
        a, b = self._elements, other._elements
        if len(a) != len(b):
            return False
        return a[0] == b[0] if len(a) == 1 else set(a) == set(b)

    def __hash__(self) -> int:
        return hash(frozenset(self._elements))

    def __repr__(self) -> str:
        return f"Antichain({self.elements})"


def advance_by(times: np.ndarray, frontier: Antichain) -> np.ndarray:
    """``meet over f in F of join(t, f)`` for every row: the compaction rule of the 2016 roadmap.

    Two times that compare the same way to every time beyond ``F`` map to the same time, and every
    time beyond ``F`` is left unchanged. An empty frontier leaves times as they are.
    """
    if frontier.is_empty() or len(times) == 0:
        return times
    f = frontier.array(times.shape[1])
    if len(f) == 1:
        return np.maximum(times, f[0])
    out = np.maximum(times, f[0])
    for row in f[1:]:
        np.minimum(out, np.maximum(times, row), out=out)
    return out


class MutableAntichain:
    """Counted times; ``frontier()`` is the antichain of minimal times with positive count."""

    def __init__(self) -> None:
        self._counts: dict[tuple[int, ...], int] = {}
        self._frontier: Antichain | None = None

    def update(self, time: Time, delta: int) -> None:
        """Add ``delta`` to the count of ``time`` (counts never go negative)."""
        self._frontier = None
        t = time if type(time) is tuple else as_tuple(time)
        counts = self._counts
        c = counts.get(t, 0) + delta
        if c > 0:
            counts[t] = c
        elif c == 0:
            counts.pop(t, None)
        else:
            raise CompactionError(f"MutableAntichain count for {t} went negative")

    def update_frontier(self, old: Antichain | None, new: Antichain | None) -> None:
        """Replace one holder's frontier ``old`` by ``new`` (either may be ``None``)."""
        if old is not None and new is not None and len(old._elements) == 1 == len(new._elements):
            counts = self._counts  # one time for another (a reader moving on): two dict updates
            t, u = new._elements[0], old._elements[0]
            if t == u:
                return
            c = counts.get(u, 0)
            if c < 1:
                raise CompactionError(f"MutableAntichain count for {u} went negative")
            self._frontier = None
            counts[t] = counts.get(t, 0) + 1
            if c == 1:
                del counts[u]
            else:
                counts[u] = c - 1
            return
        if new is not None:
            for t in new._elements:
                self.update(t, +1)
        if old is not None:
            for t in old._elements:
                self.update(t, -1)

    def frontier(self) -> Antichain:
        """The minimal times with a positive count."""
        if self._frontier is None:
            counts = self._counts
            if len(counts) == 1:  # one time held: it is the frontier
                (t,) = counts
                f = Antichain.__new__(Antichain)
                f._elements, f._array, f._one = [t], None, t[0] if len(t) == 1 else None
                self._frontier = f
            else:
                self._frontier = Antichain(counts)
        return self._frontier

    def is_empty(self) -> bool:
        """True when no time has a positive count."""
        return not self._counts
