"""The join's record builder: ids of ``f(key, left, right)`` for columns of key, left and right ids.

A join emits, per matched pair of updates, the record ``f(key, left val, right val)``. ``f`` is
deterministic, and the same triples recur at many times, so the builder remembers them: ``(key, left)``
pairs are numbered densely by a key table, so that ``(number, right)`` fits one int64 code of a memo
whose results are the output ids. Both are caches bounded by the memo limit (they start afresh
together), and are forgotten whenever the interner reclaims ids (a code could then name other records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .ids import pack, unpack
from .keytable import KeyTable
from .memo import Memo

if TYPE_CHECKING:
    from .interner import Interner


class RecordBuilder:
    """``builder(keys, left vals, right vals) -> ids of f(key, left, right)``, memoized."""

    def __init__(self, interner: Interner, f: Callable) -> None:
        self.interner = interner
        self.f = f
        self._lefts = KeyTable()  # (key, left) codes, numbered
        self._triples = Memo(self._compute, limit=interner.memo_limit)

    def _compute(self, codes: np.ndarray) -> np.ndarray:
        number, right = unpack(codes)
        key, left = unpack(self._lefts.keys[number])
        interner = self.interner
        known: list = []
        cols = [interner.value_list(key, known), interner.value_list(left, known), interner.value_list(right, known)]
        return interner.ids(list(map(self.f, *cols)), known)

    def clear(self) -> None:
        """Forget every remembered record (the key table and the memo together: the memo's codes hold
        the table's numbers)."""
        self._lefts = KeyTable()
        self._triples.clear()

    def __len__(self) -> int:
        return len(self._triples)

    def __call__(self, keys: np.ndarray, lefts: np.ndarray, rights: np.ndarray) -> np.ndarray:
        if len(self._lefts) >= self._triples.limit or self._triples.full():
            self.clear()
        return self._triples(pack(self._lefts.index(pack(keys, lefts)), rights))
