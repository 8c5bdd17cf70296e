"""Record ids back to int columns, in one pass: what a capture drains as columns.

Ids index two per-id columns (see ``ddflow.operators.values.ids``): ``kinds`` (int8) and ``payload``
(int64). An id of the *int* kind holds its int as payload; an id of the *pair* kind holds the ids of
its two components packed as ``first << 32 | second``. :func:`int_columns` reads a batch of ids and,
when every one is an int (or every one a pair of two ints) of magnitude below ``bound``, returns
their values as columns; anything else (another kind anywhere, an int out of bounds, a mix of ints
and pairs) makes it answer width 0, and the caller takes the values one by one. It only reads.

:func:`int_columns_reference` states the same contract with numpy.

The other way, a column of ints that covers a dense range takes consecutive ids (the *run* of
``ddflow.operators.values.ids``): :func:`covers_range` says whether a column takes every int of its
range, :func:`fill_range` writes a range's ints into the payload of its ids, each in one pass with no
temporary column (:func:`covers_range_reference` and :func:`fill_range_reference` beside them).
"""

from __future__ import annotations

import numpy as np

from . import kernel

_SHIFT = 32
_LOW = (1 << 32) - 1


@kernel
def int_columns(ids: np.ndarray, kinds: np.ndarray, payload: np.ndarray, int_kind: int, pair_kind: int,
                bound: int):
    """``(width, columns)`` for the non-empty batch ``ids`` (int64, each a valid index of ``kinds``
    and ``payload``): width 1 and an ``(n, 1)`` int64 array of the values when every id is of
    ``int_kind`` with ``-bound < value < bound``; width 2 and an ``(n, 2)`` array of the components'
    values when every id is of ``pair_kind`` and both its components are such ints; else width 0 and
    an empty ``(0, 2)`` array."""
    n = ids.shape[0]
    none = np.empty((0, 2), dtype=np.int64)
    first = kinds[ids[0]]
    if first == int_kind:
        out = np.empty((n, 1), dtype=np.int64)
        for i in range(n):
            j = ids[i]
            v = payload[j]
            if kinds[j] != int_kind or v <= -bound or v >= bound:
                return 0, none
            out[i, 0] = v
        return 1, out
    if first != pair_kind:
        return 0, none
    out = np.empty((n, 2), dtype=np.int64)
    for i in range(n):
        j = ids[i]
        if kinds[j] != pair_kind:
            return 0, none
        code = payload[j]
        a = code >> _SHIFT
        b = code & _LOW
        if kinds[a] != int_kind or kinds[b] != int_kind:
            return 0, none
        va = payload[a]
        vb = payload[b]
        if va <= -bound or va >= bound or vb <= -bound or vb >= bound:
            return 0, none
        out[i, 0] = va
        out[i, 1] = vb
    return 2, out


def int_columns_reference(ids: np.ndarray, kinds: np.ndarray, payload: np.ndarray, int_kind: int, pair_kind: int,
                          bound: int) -> tuple[int, np.ndarray]:
    """:func:`int_columns` with numpy: the kinds checked as a whole, then the values."""
    none = np.empty((0, 2), dtype=np.int64)

    def ints(of: np.ndarray) -> np.ndarray | None:
        if not (kinds[of] == int_kind).all():
            return None
        values = payload[of]
        return values if ((values > -bound) & (values < bound)).all() else None

    alone = ints(ids)
    if alone is not None:
        return 1, alone.reshape(-1, 1)
    if not (kinds[ids] == pair_kind).all():
        return 0, none
    codes = payload[ids]
    a, b = ints(codes >> _SHIFT), ints(codes & _LOW)
    if a is None or b is None:
        return 0, none
    return 2, np.stack([a, b], axis=1)


@kernel
def covers_range(keys: np.ndarray, lo: int, span: int) -> bool:
    """Whether the ints of ``keys`` (each ``lo <= k < lo + span``, repeats allowed) take every int of
    that range."""
    seen = np.zeros(span, dtype=np.bool_)
    missing = span
    for i in range(keys.shape[0]):
        j = keys[i] - lo
        if not seen[j]:
            seen[j] = True
            missing -= 1
    return missing == 0


@kernel
def fill_range(out: np.ndarray, lo: int) -> None:
    """``out[j] = lo + j`` for every ``j``, in place (``lo + len(out)`` within int64)."""
    for j in range(out.shape[0]):
        out[j] = lo + j


def covers_range_reference(keys: np.ndarray, lo: int, span: int) -> bool:
    """:func:`covers_range` with numpy: the distinct keys counted."""
    return len(np.unique(keys)) == span


def fill_range_reference(out: np.ndarray, lo: int) -> None:
    """:func:`fill_range` with numpy."""
    out[:] = np.arange(lo, lo + len(out), dtype=np.int64)
