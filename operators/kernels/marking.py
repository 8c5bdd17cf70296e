"""Marking: the ids reachable from root ids through composite ids (pairs and their components).

Ids are dense indexes into per-id columns: ``kinds[i]`` (a small int) and ``payload[i]`` (int64).
An id whose kind is *composite* (``composite[kinds[i]]`` true) refers to two other ids packed in its
payload, ``payload >> 32`` and ``payload & (2**32 - 1)``, which are reachable whenever it is. This is
the mark phase of reclaiming ids: the roots are every id column the dataflow's state holds.
"""

from __future__ import annotations

import numpy as np

from . import kernel

_LOW = (1 << 32) - 1


@kernel
def mark(roots: np.ndarray, marks: np.ndarray, kinds: np.ndarray, composite: np.ndarray,
         payload: np.ndarray) -> int:
    """Set ``marks[i]`` for every id ``i`` reachable from ``roots``; returns how many were newly set.

    ``marks`` (bool) is written in place and may already hold marks (their ids are not walked again).
    Roots outside ``0 <= i < len(marks)`` are ignored."""
    n = marks.shape[0]
    stack = np.empty(1024, dtype=np.int64)
    top = 0
    added = 0
    for j in range(roots.shape[0]):
        r = roots[j]
        if r < 0 or r >= n or marks[r]:
            continue
        marks[r] = True
        added += 1
        stack[0] = r
        top = 1
        while top > 0:
            top -= 1
            i = stack[top]
            if not composite[kinds[i]]:
                continue
            code = payload[i]
            for c in (code >> 32, code & _LOW):
                if c < n and not marks[c]:
                    marks[c] = True
                    added += 1
                    if top == stack.shape[0]:
                        grown = np.empty(2 * top, dtype=np.int64)
                        grown[:top] = stack[:top]
                        stack = grown
                    stack[top] = c
                    top += 1
    return added


def ref_mark(roots: np.ndarray, marks: np.ndarray, kinds: np.ndarray, composite: np.ndarray,
             payload: np.ndarray) -> int:
    """:func:`mark` by a plain worklist over Python ints."""
    n, added = len(marks), 0
    todo = [r for r in roots.tolist() if 0 <= r < n]
    while todo:
        i = todo.pop()
        if marks[i]:
            continue
        marks[i] = True
        added += 1
        if composite[kinds[i]]:
            code = int(payload[i])
            todo += [c for c in (code >> 32, code & _LOW) if c < n]
    return added
