"""Frontier tests on time columns: which rows of a batch's times are beyond an antichain, and the
least iteration of the complete work a loop holds.

A time ``t`` is beyond a frontier ``F`` when ``t >= f`` (coordinate-wise) for some ``f`` in ``F``.
Splitting a batch into its complete and pending updates asks this of every row; one kernel call
answers it for all rows and all elements of the frontier, and counts the rows beyond, so the caller
knows without another pass whether the batch is all complete, all pending or split.
"""

from __future__ import annotations

import numpy as np

from . import helper, kernel


@helper
def row_beyond(times, i, frontier):
    """Whether row ``i`` of ``times`` (``(n, d)`` int64) is ``>=`` some row of ``frontier``
    (``(m, d)`` int64): the time is not complete yet. An empty frontier has no row beyond it."""
    for f in range(frontier.shape[0]):
        inside = True
        for c in range(times.shape[1]):
            if times[i, c] < frontier[f, c]:
                inside = False
                break
        if inside:
            return True
    return False


@kernel
def beyond(times, frontier):
    """``(mask, count)``: ``mask[i]`` is true when row ``i`` of ``times`` (``(n, d)`` int64,
    C-contiguous) is ``>=`` some row of ``frontier`` (``(m, d)`` int64, C-contiguous, ``m >= 0``);
    ``count`` is the number of true rows. An empty frontier has no row beyond it."""
    n = times.shape[0]
    mask = np.empty(n, np.bool_)
    count = 0
    for i in range(n):
        hit = row_beyond(times, i, frontier)
        mask[i] = hit
        count += hit
    return mask, count


def beyond_reference(times: np.ndarray, frontier: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`beyond` from the definition, row by row in Python."""
    rows, elements = times.tolist(), frontier.tolist()
    mask = [any(all(x >= y for x, y in zip(t, f)) for f in elements) for t in rows]
    return np.array(mask, dtype=bool), sum(mask)


@kernel
def least_ready(times, outer):
    """``(count, least)``: of the rows of ``times`` (``(n, d)`` int64, C-contiguous, ``d >= 2``) whose
    first ``d - 1`` coordinates are not beyond ``outer`` (``(m, d - 1)`` int64, C-contiguous; an
    empty ``outer`` has nothing beyond it), how many there are and the least last coordinate among
    them (``0`` when there are none). A loop's next round is the least iteration of the work its
    nodes hold at outer times that are complete."""
    n, d = times.shape
    m = outer.shape[0]
    count = 0
    least = 0
    for i in range(n):
        beyond = False
        for f in range(m):
            inside = True
            for c in range(d - 1):
                if times[i, c] < outer[f, c]:
                    inside = False
                    break
            if inside:
                beyond = True
                break
        if not beyond:
            x = times[i, d - 1]
            if count == 0 or x < least:
                least = x
            count += 1
    return count, least


def least_ready_reference(times: np.ndarray, outer: np.ndarray) -> tuple[int, int]:
    """:func:`least_ready` from the definition, in Python."""
    ready = [t[-1] for t in times.tolist()
             if not any(all(x >= y for x, y in zip(t[:-1], f)) for f in outer.tolist())]
    return len(ready), min(ready, default=0)
