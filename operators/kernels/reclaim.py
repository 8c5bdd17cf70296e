"""Reclaiming ids: mark the ids reachable from roots, then sweep the rest into the free list.

Ids are dense indexes into per-id columns: ``kinds[i]`` (a small int; one kind value means *free*)
and ``payload[i]`` (int64). An id whose kind is *composite* (``composite[kinds[i]]`` true) refers to
two other ids packed in its payload, ``payload >> 32`` and ``payload & (2**32 - 1)``, which are
reachable whenever it is. :func:`mark` walks them from the roots (every id column the dataflow's
state holds); :func:`sweep` frees what was not reached and lists the free ids, in place and without
a temporary per id.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel

_LOW = (1 << 32) - 1
_inline = numba.njit(inline="always", cache=True, nogil=True)  # helpers of the kernels, inlined into them


@kernel
def mark(roots: np.ndarray, marks: np.ndarray, kinds: np.ndarray, composite: np.ndarray,
         payload: np.ndarray) -> int:
    """Set ``marks[i]`` for every id ``i`` reachable from ``roots``; returns how many were newly set.

    ``marks`` (bool) is written in place and may already hold marks (their ids are not walked again).
    Roots outside ``0 <= i < len(marks)`` are ignored. A composite id's components are marked as it is
    visited; only components that are composite themselves wait on the stack to be visited."""
    n = marks.shape[0]
    stack = np.empty(1024, dtype=np.int64)
    added = 0
    for j in range(roots.shape[0]):
        r = roots[j]
        if r < 0 or r >= n or marks[r]:
            continue
        marks[r] = True
        added += 1
        if not composite[kinds[r]]:
            continue
        top = 0
        i = r
        while True:
            code = payload[i]
            for c in (code >> 32, code & _LOW):
                if c < n and not marks[c]:
                    marks[c] = True
                    added += 1
                    if composite[kinds[c]]:
                        if top == stack.shape[0]:
                            stack = _grown(stack)
                        stack[top] = c
                        top += 1
            if top == 0:
                break
            top -= 1
            i = stack[top]
    return added


@_inline
def _grown(stack: np.ndarray) -> np.ndarray:
    """The stack in an array twice its size (copied by a loop: see kernels.sorting._back)."""
    grown = np.empty(2 * stack.shape[0], dtype=np.int64)
    for x in range(stack.shape[0]):
        grown[x] = stack[x]
    return grown


@kernel
def sweep(kinds: np.ndarray, marks: np.ndarray, n: int, free: int, reported: np.ndarray):
    """Free every id ``i < n`` that is neither marked nor free (``kinds[i] = free``), and list the free
    ids below the new high-water mark.

    Returns ``(freed, reported ids, free list, high)``: how many ids were freed; those of them whose
    kind had ``reported[kind]`` true, ascending; every free id below ``high``, descending (so that
    popping from the end hands out the lowest first); ``high`` = one past the greatest id in use."""
    freed = 0
    count = 0
    for i in range(n):
        k = kinds[i]
        if k != free and not marks[i]:
            freed += 1
            if reported[k]:
                count += 1
    out = np.empty(count, dtype=np.int64)
    count = 0
    high = 0
    for i in range(n):
        k = kinds[i]
        if k != free:
            if marks[i]:
                high = i + 1
            else:
                if reported[k]:
                    out[count] = i
                    count += 1
                kinds[i] = free
    nfree = 0
    for i in range(high):
        if kinds[i] == free:
            nfree += 1
    listed = np.empty(nfree, dtype=np.int64)
    j = 0
    for i in range(high - 1, -1, -1):
        if kinds[i] == free:
            listed[j] = i
            j += 1
    return freed, out, listed, high


def ref_sweep(kinds: np.ndarray, marks: np.ndarray, n: int, free: int, reported: np.ndarray):
    """:func:`sweep` with numpy masks."""
    k = kinds[:n]
    dead = np.flatnonzero((k != free) & ~marks[:n])
    out = dead[reported[k[dead]]] if len(dead) else dead
    kinds[dead] = free
    used = np.flatnonzero(kinds[:n] != free)
    high = int(used[-1]) + 1 if len(used) else 0
    return len(dead), out, np.flatnonzero(kinds[:high] == free)[::-1], high


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
