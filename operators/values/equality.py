"""Equality of the values a dataflow interns: which values are equal, distinct or may alias.

Python equality decides a record's id (`ddflow.operators.values.interner`): equal values share
one. These functions answer the questions the interner asks of a batch of values before it numbers
them: are they all equal (`all_equal`), which are distinct (`distinct`, `distinct_rows` for records
given field by field), and can a value equal an int or a 2-tuple without being one (`plain`,
`all_plain`, `int_equal`), in which case it must share the int's or pair's id. A value that cannot
be hashed raises `Unhashable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count as count_from

import numpy as np

__all__ = ["I64_MAX", "I64_MIN", "NEVER_INT", "Unhashable", "all_equal", "all_plain", "distinct", "distinct_rows",
           "int_equal", "plain"]

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
HASH_MOD = (1 << 61) - 1  # CPython's hash of an int is the int modulo this prime (sign kept)
NEVER_INT = frozenset((str, bytes, type(None), frozenset, range, type))  # types never equal to an int


class Unhashable(TypeError):
    """A value (or a component of a tuple) cannot be hashed."""


def all_equal(values: list) -> bool:
    """Whether every value equals the first (then they all have its id)."""
    try:
        return bool(values[-1] == values[0]) and values.count(values[0]) == len(values)
    except Exception:  # values whose equality is not a bool (arrays): not a shortcut to take
        return False


def distinct(values: list) -> dict:
    """The distinct values, first of equal ones kept, in order of first appearance."""
    try:
        return dict.fromkeys(values)
    except TypeError as exc:
        raise Unhashable(str(exc)) from exc


def distinct_rows(columns: Sequence[np.ndarray | list]) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, firsts)`` for records given field by field: ``codes[i]`` numbers record ``i``
    among the distinct records (equal field by field, as tuples compare) in order of first
    appearance, ``firsts`` the position of each distinct record's first appearance."""
    key, count = None, 1
    for column in columns:
        if isinstance(column, np.ndarray):
            _, codes = np.unique(column, return_inverse=True)
            size = int(codes.max()) + 1
        else:
            index = dict(zip(dict.fromkeys(column), count_from(0)))  # equal values: one code
            codes = np.fromiter(map(index.__getitem__, column), dtype=np.int64, count=len(column))
            size = len(index)
        key = codes.astype(np.int64) if key is None else key * size + codes
        count *= size
        if count >= 1 << 31:  # keep key * size within int64: number the distinct keys densely
            _, key = np.unique(key, return_inverse=True)
            count = int(key.max()) + 1
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def all_plain(values: list) -> bool:
    """`plain` of every value (by their types at C speed where that decides)."""
    types = set(map(type, values))
    if types <= NEVER_INT:
        return True
    if types == {tuple}:
        return 2 not in set(map(len, values))
    return all(map(plain, values))


def plain(v: object) -> bool:
    """Whether ``v`` can equal neither an int nor a 2-tuple (so it needs no alias check)."""
    kind = type(v)
    if kind in NEVER_INT:
        return True
    if kind is float:
        return not v.is_integer()
    if kind is tuple:
        return len(v) != 2
    return False


def int_equal(v: object) -> int | None:
    """The int in int64 range that ``v`` equals, if any (found through ``hash``: equal values hash
    alike, and an int's hash is the int modulo ``2**61 - 1``)."""
    if isinstance(v, tuple):
        return None
    if type(v) is float:
        return int(v) if v.is_integer() and I64_MIN <= v < 2.0**63 else None
    h = hash(v)
    cands = []
    if h >= 0:
        cands += [h + k * HASH_MOD for k in range(5)]
        if h == 0:
            cands += [-k * HASH_MOD for k in range(1, 5)]
    else:
        base = [1, 2] if h == -2 else [-h]
        cands += [-(b + k * HASH_MOD) for b in base for k in range(5)]
    for c in cands:
        if I64_MIN <= c <= I64_MAX:
            try:
                if v == c:
                    return c
            except Exception:  # an object whose equality with ints fails: it equals none
                return None
    return None
