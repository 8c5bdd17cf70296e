"""Frontier tests on time columns: which rows of a batch's times are beyond an antichain.

A time ``t`` is beyond a frontier ``F`` when ``t >= f`` (coordinate-wise) for some ``f`` in ``F``.
Splitting a batch into its complete and pending updates asks this of every row; one kernel call
answers it for all rows and all elements of the frontier, and counts the rows beyond, so the caller
knows without another pass whether the batch is all complete, all pending or split.
"""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel
def beyond(times, frontier):
    """``(mask, count)``: ``mask[i]`` is true when row ``i`` of ``times`` (``(n, d)`` int64,
    C-contiguous) is ``>=`` some row of ``frontier`` (``(m, d)`` int64, C-contiguous, ``m >= 0``);
    ``count`` is the number of true rows. An empty frontier has no row beyond it."""
    n, d = times.shape
    m = frontier.shape[0]
    mask = np.empty(n, np.bool_)
    count = 0
    for i in range(n):
        hit = False
        for f in range(m):
            inside = True
            for c in range(d):
                if times[i, c] < frontier[f, c]:
                    inside = False
                    break
            if inside:
                hit = True
                break
        mask[i] = hit
        count += hit
    return mask, count


def beyond_reference(times: np.ndarray, frontier: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`beyond` from the definition, row by row in Python."""
    rows, elements = times.tolist(), frontier.tolist()
    mask = [any(all(x >= y for x, y in zip(t, f)) for f in elements) for t in rows]
    return np.array(mask, dtype=bool), sum(mask)
