"""Record ids: every distinct Python value a dataflow sees is interned to a dense int64 id.

Batches and arrangements then hold only integer columns, so consolidation, sorting and lookups are
pure numpy (the 2018 post's interning and row ids). Equality is Python equality. Keyed operators view
a record id as a ``(key id, val id)`` pair; the split is cached per id so that it costs Python work once
per distinct record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .errors import ShapeError
from .memo import MAX_ID, SHIFT, Memo, pack


class Interner:
    """Dense ids for hashable values; ``values(ids)`` maps back."""

    def __init__(self) -> None:
        self._ids: dict[object, int] = {}
        self._values: list[object] = []
        self._array: np.ndarray = np.empty(0, dtype=object)
        self._filled = 0  # how many of _values are copied into _array
        self._key_of = np.empty(0, dtype=np.int64)
        self._val_of = np.empty(0, dtype=np.int64)
        self._pairs = Memo(self._make_pairs)

    def __len__(self) -> int:
        return len(self._values)

    def id(self, value: object) -> int:
        ids = self._ids
        i = ids.get(value)
        if i is None:
            i = ids[value] = len(self._values)
            self._values.append(value)
        return i

    def ids(self, values: Iterable[object]) -> np.ndarray:
        """Ids of many values (interning new ones)."""
        get, ids, vals = self._ids.get, self._ids, self._values
        out = []
        append = out.append
        for v in values:
            i = get(v)
            if i is None:
                try:
                    i = ids[v] = len(vals)
                except TypeError as exc:
                    raise ShapeError(f"record {v!r} is not hashable") from exc
                vals.append(v)
            append(i)
        return np.asarray(out, dtype=np.int64)

    def values(self, ids: np.ndarray) -> np.ndarray:
        """An object array of the values behind ``ids``."""
        n = len(self._values)
        if self._filled < n:
            if len(self._array) < n:
                grown = np.empty(max(2 * n, 1024), dtype=object)
                grown[: self._filled] = self._array[: self._filled]
                self._array = grown
            self._array[self._filled : n] = np.fromiter(self._values[self._filled : n], dtype=object,
                                                        count=n - self._filled)
            self._filled = n
        return self._array[ids]

    def value(self, i: int) -> object:
        return self._values[int(i)]

    def split(self, ids: np.ndarray, step: str) -> tuple[np.ndarray, np.ndarray]:
        """``(key ids, val ids)`` of records that must be ``(key, val)`` pairs."""
        self._grow_split()
        keys = self._key_of[ids]
        missing = np.unique(ids[keys < 0])
        for i in missing.tolist():
            rec = self._values[i]
            if not (isinstance(rec, tuple) and len(rec) == 2):
                raise ShapeError(f"{step} needs (key, val) records, got {rec!r}")
            self._key_of[i] = self.id(rec[0])
            self._val_of[i] = self.id(rec[1])
            self._grow_split()
        if len(missing):
            keys = self._key_of[ids]
        return keys, self._val_of[ids]

    def pair(self, keys: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Ids of the records ``(key, val)`` for id columns ``keys`` and ``vals``."""
        return self._pairs(pack(keys, vals))

    def _make_pairs(self, codes: np.ndarray) -> np.ndarray:
        kv = self.values(codes >> SHIFT)
        vv = self.values(codes & MAX_ID)
        return self.ids(zip(kv.tolist(), vv.tolist()))

    def make(self, builder, *columns: np.ndarray) -> np.ndarray:
        """Ids of ``builder(*values)`` over value columns given as id arrays (no memo)."""
        cols = [self.values(c).tolist() for c in columns]
        return self.ids(builder(*row) for row in zip(*cols))

    def builder(self, f) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """A memoized ``(keys, left vals, right vals) -> ids of f(key, left, right)`` (f deterministic).

        ``(key, left)`` pairs get dense ids of their own, so both memo codes fit in an int64."""
        lefts: list[np.ndarray] = []  # chunks of (key, left) codes, indexed by their dense id

        def number_lefts(codes: np.ndarray) -> np.ndarray:
            start = sum(len(c) for c in lefts)
            lefts.append(codes)
            return np.arange(start, start + len(codes), dtype=np.int64)

        def compute(codes: np.ndarray) -> np.ndarray:
            if len(lefts) > 1:
                lefts[:] = [np.concatenate(lefts)]
            kl = lefts[0][codes >> SHIFT]
            cols = [self.values(kl >> SHIFT).tolist(), self.values(kl & MAX_ID).tolist(),
                    self.values(codes & MAX_ID).tolist()]
            return self.ids(f(*row) for row in zip(*cols))

        left, full = Memo(number_lefts), Memo(compute)
        return lambda keys, a, b: full(pack(left(pack(keys, a)), b))

    def _grow_split(self) -> None:
        n = len(self._values)
        if len(self._key_of) < n:
            extra = max(n - len(self._key_of), len(self._key_of))
            self._key_of = np.concatenate([self._key_of, np.full(extra, -1, dtype=np.int64)])
            self._val_of = np.concatenate([self._val_of, np.full(extra, -1, dtype=np.int64)])


def sort_values(values: Sequence[object]) -> list[int]:
    """Indices ordering ``values`` by Python ordering, falling back to ``repr`` for mixed types."""
    try:
        return sorted(range(len(values)), key=values.__getitem__)
    except TypeError:
        return sorted(range(len(values)), key=lambda i: (type(values[i]).__name__, repr(values[i])))
