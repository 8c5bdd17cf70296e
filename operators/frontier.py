"""Frontiers: antichains of times that bound which times may still receive updates.

A time ``t`` is *beyond* a frontier ``F`` when ``t >= f`` for some ``f`` in ``F``; such times may still
change. Times not beyond ``F`` are *complete*. The empty antichain is the frontier of a closed stream:
nothing is beyond it, everything is complete.

``Antichain`` keeps only minimal elements; the meet of antichains is the lower envelope of their union.
``MutableAntichain`` counts holds (e.g. readers' compaction frontiers) and exposes the frontier of the
times with positive count.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .errors import CompactionError
from .kernels.frontier import beyond as beyond_kernel
from .lattice import Time, as_tuple


def _le(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Product order on coordinate tuples of equal length."""
    for x, y in zip(a, b):
        if x > y:
            return False
    return True


def _covered(elements: list[tuple[int, ...]], t: tuple[int, ...] | list[int]) -> bool:
    """True when some of ``elements`` is ``<= t`` (:func:`_le` written out: no call per element)."""
    for e in elements:
        for x, y in zip(e, t):
            if x > y:
                break
        else:
            return True
    return False


_TRUE = np.ones(1, dtype=bool)  # the masks of one row (read-only: shared by every caller)
_TRUE.flags.writeable = False
_FALSE = np.zeros(1, dtype=bool)
_FALSE.flags.writeable = False


class Antichain:
    """A set of mutually incomparable times (tuples); inserting keeps only the minimal ones."""

    __slots__ = ("_elements", "_array", "_one", "_hash")

    def __init__(self, elements: Iterable[Time] = ()) -> None:
        self._elements: list[tuple[int, ...]] = []
        self._array: np.ndarray | None = None  # array() of the elements, kept until they change
        self._one: int | None = None  # the coordinate of a frontier of one 1-dimensional time, else None
        self._hash: int | None = None
        for e in elements:
            self.insert(e)

    def insert(self, time: Time) -> bool:
        """Insert ``time`` unless some element is ``<=`` it; drop elements it dominates."""
        t = time if type(time) is tuple else as_tuple(time)
        self._array = self._hash = None
        if not self._elements:  # the common frontier of one time
            self._elements.append(t)
            self._one = t[0] if len(t) == 1 else None
            return True
        if _covered(self._elements, t):
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
        return _covered(self._elements, t)

    def dominates(self, other: Antichain) -> bool:
        """True when every element of ``other`` is beyond ``self`` (``self <= other`` as frontiers)."""
        if self is other:
            return True
        a = self._one
        if a is not None:  # one 1-dimensional time each: compare them as ints
            b = other._one
            if b is not None:
                return a <= b
        mine, theirs = self._elements, other._elements
        if mine and theirs and not mine[1:] and not theirs[1:]:  # one time each: compare them
            return _le(mine[0], theirs[0])
        for e in theirs:
            if not _covered(mine, e):
                return False
        return True

    def meet(self, other: Antichain) -> Antichain:
        """The lower envelope of the union: the frontier that holds back what either holds back."""
        return Antichain([*self._elements, *other._elements])

    def beyond(self, times: np.ndarray) -> np.ndarray:
        """Vectorized: mask of rows of an ``(n, d)`` array that are beyond the frontier."""
        return self.split(times)[0]

    def split(self, times: np.ndarray) -> tuple[np.ndarray, int]:
        """``(mask, count)``: :meth:`beyond` of the rows of an ``(n, d)`` int64 array, and how many
        rows are beyond (so ``0``: all complete, ``n``: none). One compiled pass over the rows."""
        n = times.shape[0]
        elements = self._elements
        if not elements or n == 0:
            return np.zeros(n, dtype=bool), 0
        if n == 1:  # one row (common at one change per epoch): compared as a list, no array passes
            hit = _covered(elements, times[0].tolist())
            return (_TRUE if hit else _FALSE), int(hit)
        if not times.flags.c_contiguous:
            times = np.ascontiguousarray(times)
        a = self._array  # array()'s kept answer, read without a call
        if a is None or a.shape[1] != times.shape[1]:
            a = self.array(times.shape[1])
        return beyond_kernel(times, a)

    def array(self, depth: int) -> np.ndarray:
        """The times as an ``(n, depth)`` int64 array (read-only; the same array while the elements stay)."""
        a = self._array
        if a is None or a.shape[1] != depth:
            # the elements are tuples of ints already: no conversion of each
            elements = self._elements
            a = np.array(elements, dtype=np.int64) if elements else np.empty((0, depth), dtype=np.int64)
            if a.shape[1] != depth:
                raise ValueError(f"the times of {self!r} have {a.shape[1]} coordinates, not {depth}")
            a.flags.writeable = False
            self._array = a
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
        if type(other) is not Antichain:
            return False
        if self._one is not None and other._one is not None:
            return self._one == other._one
        a, b = self._elements, other._elements
        return a == b or set(a) == set(b)  # (no repeats in an antichain: equal sets, equal lengths)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(frozenset(self._elements))
        return h

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
        if old is not None and new is not None and len(old._elements) == len(new._elements):
            counts = self._counts  # one frontier for another of as many times (a reader moving on)
            gone, added = old._elements, new._elements
            if gone == added:
                return
            for u in gone:
                if counts.get(u, 0) < 1:
                    raise CompactionError(f"MutableAntichain count for {u} went negative")
            self._frontier = None
            for t in added:
                counts[t] = counts.get(t, 0) + 1
            for u in gone:
                c = counts[u]
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
                f._elements, f._array, f._one, f._hash = [t], None, t[0] if len(t) == 1 else None, None
                self._frontier = f
            else:
                self._frontier = Antichain(counts)
        return self._frontier

    def is_empty(self) -> bool:
        """True when no time has a positive count."""
        return not self._counts
