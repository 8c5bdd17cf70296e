"""Gathers: rows of a column selected by ranges, without a Python loop per range."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel
def _ranges_to_index(starts, ends):
    total = 0
    for i in range(len(starts)):
        if ends[i] > starts[i]:
            total += ends[i] - starts[i]
    out = np.empty(total, np.int64)
    w = 0
    for i in range(len(starts)):
        for x in range(starts[i], ends[i]):
            out[w] = x
            w += 1
    return out


def ranges_to_index(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair ``(starts[i], ends[i])`` (empty when ``e <= s``),
    in order, as int64: the row index that gathers those ranges of a column in one ``take``."""
    return _ranges_to_index(np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64))


def ranges_to_index_reference(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`ranges_to_index` by ``numpy.repeat`` and ``cumsum``."""
    lengths = np.maximum(np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64), 0)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - offsets, lengths) + np.arange(total, dtype=np.int64)
