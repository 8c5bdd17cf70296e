"""Key tables: dense indexes ``0, 1, 2, …`` for distinct int64 keys, numbered as they first appear.

A ``KeyTable`` is a compiled open-addressing hash table (:mod:`ddflow.operators.kernels.hashtable`)
whose values are the keys' indexes, with the keys themselves in an array by index. Every operation
takes a whole column of keys and is one kernel call, whatever the number of keys or probes. Memos
number their codes in key tables; the join's record builder numbers its ``(key, left)`` pairs.
"""

from __future__ import annotations

import numpy as np

from ..kernels import hashtable as ht

_NO_FREE = np.empty(0, dtype=np.int64)
_LIMIT = (1 << 31) - 1  # indexes are stored in int32 buckets


class KeyTable:
    """Dense indexes for distinct int64 keys: the ``n`` keys seen so far are numbered ``0..n-1`` in the
    order they first appeared; ``keys[i]`` is key ``i``."""

    def __init__(self) -> None:
        self._keys = np.empty(16, dtype=np.int64)
        self._slots, self._tags = ht.empty()
        self.n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def keys(self) -> np.ndarray:
        """The keys by index (a view: valid until the next insertion)."""
        return self._keys[: self.n]

    def nbytes(self) -> int:
        return self._keys.nbytes + self._slots.nbytes + self._tags.nbytes

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The index of each key, ``-1`` for keys not in the table."""
        if self.n == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        return ht.find_tagged(self._slots, self._tags, self._keys, np.ascontiguousarray(keys, dtype=np.int64))

    def index(self, keys: np.ndarray) -> np.ndarray:
        """The index of each key, numbering the keys not seen before ``n, n + 1, …`` in their order."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        parts = []
        while True:
            out, self._slots, self._tags, _count, _nfree, self.n, done = ht.insert_tagged(
                self._slots, self._tags, self._keys, keys, self.n, _NO_FREE, 0, self.n, _LIMIT)
            if done == len(keys):
                return np.concatenate([*parts, out]) if parts else out
            if self.n >= _LIMIT:
                raise OverflowError(f"a key table holds at most {_LIMIT} keys")
            parts.append(out[:done])
            grown = np.empty(2 * len(self._keys), dtype=np.int64)
            grown[: self.n] = self._keys[: self.n]
            self._keys = grown
            keys = keys[done:]

    def append(self, keys: np.ndarray) -> None:
        """Number distinct keys that are not in the table ``n, n + 1, …`` in their order."""
        self.index(keys)
