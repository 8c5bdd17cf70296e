"""Cursors: walking a trace's consolidated contents key by key, val by val."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from ..kernels.sorting import distinct
from .batch import Updates


class TraceCursor:
    """Walks a trace's consolidated contents key by key, val by val, with each val's history."""

    def __init__(self, contents: Updates) -> None:
        self._u = contents

    def __iter__(self) -> Iterator[tuple[int, int, list[tuple[tuple[int, ...], int]]]]:
        k, v = self._u.data
        times, diffs = self._u.times, self._u.diffs
        rows = range(len(diffs))
        for (key, val), group in itertools.groupby(rows, key=lambda i: (int(k[i]), int(v[i]))):
            yield key, val, [(tuple(int(c) for c in times[i]), int(diffs[i])) for i in group]

    def keys(self) -> np.ndarray:
        return distinct(self._u.data[0])
