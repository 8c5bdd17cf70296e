"""Vectorized memos: the result of a pure per-record function, remembered per record id.

User functions of ``map``/``filter`` and the record builders of joins are deterministic functions of
their inputs (as differential dataflow requires), and the same records recur at many times and in many
iterations. A memo maps int64 codes (a record id, or two ids packed into one int64) to int64 results
with sorted arrays and ``searchsorted``, so a batch costs Python work only for codes never seen before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SHIFT = 32
MAX_ID = (1 << 31) - 1


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 code per pair of ids (each below 2**31)."""
    return (a.astype(np.int64) << SHIFT) | b.astype(np.int64)


class Memo:
    """``codes -> results`` for a function computed on the codes it has not seen yet."""

    def __init__(self, compute: Callable[[np.ndarray], np.ndarray]) -> None:
        self.compute = compute
        self._keys = np.empty(0, dtype=np.int64)
        self._vals = np.empty(0, dtype=np.int64)
        self._recent_keys = np.empty(0, dtype=np.int64)
        self._recent_vals = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._keys) + len(self._recent_keys)

    @staticmethod
    def _find(keys: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(keys) == 0:
            return np.zeros(len(codes), dtype=bool), np.zeros(len(codes), dtype=np.int64)
        idx = np.minimum(np.searchsorted(keys, codes), len(keys) - 1)
        return keys[idx] == codes, idx

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        out = np.empty(len(codes), dtype=np.int64)
        found, idx = self._find(self._keys, codes)
        out[found] = self._vals[idx[found]]
        rest = ~found
        if rest.any():
            found2, idx2 = self._find(self._recent_keys, codes[rest])
            sub = np.flatnonzero(rest)
            out[sub[found2]] = self._recent_vals[idx2[found2]]
            missing = sub[~found2]
            if len(missing):
                new, inv = np.unique(codes[missing], return_inverse=True)
                vals = np.asarray(self.compute(new), dtype=np.int64)
                out[missing] = vals[inv]
                self._add(new, vals)
        return out

    def _add(self, keys: np.ndarray, vals: np.ndarray) -> None:
        k = np.concatenate([self._recent_keys, keys])
        v = np.concatenate([self._recent_vals, vals])
        if len(k) * 4 > len(self._keys):
            k = np.concatenate([self._keys, k])
            v = np.concatenate([self._vals, v])
            order = np.argsort(k, kind="stable")
            self._keys, self._vals = k[order], v[order]
            self._recent_keys = self._recent_vals = np.empty(0, dtype=np.int64)
        else:
            order = np.argsort(k, kind="stable")
            self._recent_keys, self._recent_vals = k[order], v[order]
