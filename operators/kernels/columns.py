"""Record ids back to int columns, in one pass: what a capture drains as columns.

Ids index two per-id columns (see ``ddflow.operators.values.ids``): ``kinds`` (int8) and ``payload``
(int64). An id of the *int* kind holds its int as payload; an id of the *pair* kind holds the ids of
its two components packed as ``first << 32 | second``. :func:`int_columns` reads a batch of ids and,
when every one is an int (or every one a pair of two ints) of magnitude below ``bound``, returns
their values as columns; anything else (another kind anywhere, an int out of bounds, a mix of ints
and pairs) makes it answer width 0, and the caller takes the values one by one. It only reads.

:func:`int_columns_reference` states the same contract with numpy.

:func:`key_owners` places a batch of ids by their values' stable key hash
(``ddflow.operators.partition``: ``key_hash(value) % count``) in one pass for ids of ints and of
pairs of two ints, whose element hashes are Python's numeric and tuple hashes computed from the
payloads; any other id is left to the caller (owner ``-1``). :func:`key_owners_reference` computes
the same with the partition module's numpy columns.

The other way, a column of ints that covers a dense range takes consecutive ids (the *run* of
``ddflow.operators.values.ids``): :func:`covers_range` says whether a column takes every int of its
range, :func:`fill_range` writes a range's ints into the payload of its ids, each in one pass with no
temporary column (:func:`covers_range_reference` and :func:`fill_range_reference` beside them).
"""

from __future__ import annotations

import numpy as np

from . import helper, kernel

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


# ddflow.operators.partition's constants, here so that the kernels' cache stamp covers them (the
# property tests hold the two to each other and to key_hash)
_MODULUS = (1 << 61) - 1  # Python's numeric hash: n mod (2**61 - 1), with the sign
_PRIME_1, _PRIME_2, _PRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261  # its tuple hash
_LEN_SALT = _PRIME_5 ^ 3527539
_MASK63 = (1 << 63) - 1


@helper
def _int_element(v):
    """Python's ``hash`` of the int64 ``v``."""
    if v >= 0:
        h = np.int64(np.uint64(v) % np.uint64(_MODULUS))
    else:
        h = -np.int64((np.uint64(-(v + 1)) + np.uint64(1)) % np.uint64(_MODULUS))
    return np.int64(-2) if h == -1 else h


@helper
def _lane(acc, element):
    """One item of CPython's tuple hash: ``acc`` (uint64) with the int ``element`` mixed in."""
    acc += np.uint64(_int_element(element)) * np.uint64(_PRIME_2)
    acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
    return acc * np.uint64(_PRIME_1)


@helper
def _tuple_hash(acc, lanes):
    """CPython's tuple hash of ``lanes`` items, from the accumulator after them."""
    h = np.int64(acc + np.uint64(lanes ^ _LEN_SALT))
    return np.int64(1546275796) if h == -1 else h


@kernel
def key_owners(ids: np.ndarray, kinds: np.ndarray, payload: np.ndarray, int_kinds: np.ndarray,
               pair_kinds: np.ndarray, count: int):
    """``(owners, left)``: ``owners[i] = key_hash(value of ids[i]) % count`` for ids whose value is
    an int (a kind of ``int_kinds``, payload the int) or a pair of two such ints (a kind of
    ``pair_kinds``, payload the pair code), else ``-1``; ``left`` counts the ``-1``. ``kinds`` (int8)
    and ``payload`` (int64) are the per-id columns; ``count >= 1``."""
    n = ids.shape[0]
    owners = np.empty(n, np.int64)
    left = 0
    for i in range(n):
        j = ids[i]
        kind = kinds[j]
        is_int = False
        for k in int_kinds:
            is_int = is_int or kind == k
        is_pair = False
        for k in pair_kinds:
            is_pair = is_pair or kind == k
        if is_int:
            element = _int_element(payload[j])
        elif is_pair:
            code = payload[j]
            a, b = code >> _SHIFT, code & _LOW
            both = True
            for c in (a, b):
                ok = False
                for k in int_kinds:
                    ok = ok or kinds[c] == k
                both = both and ok
            if not both:
                owners[i] = -1
                left += 1
                continue
            acc = _lane(_lane(np.uint64(_PRIME_5), _int_element(payload[a])), _int_element(payload[b]))
            element = _tuple_hash(acc, 2)
        else:
            owners[i] = -1
            left += 1
            continue
        key = _tuple_hash(_lane(np.uint64(_PRIME_5), element), 1) & _MASK63
        owners[i] = key % count
    return owners, left


def key_owners_reference(ids: np.ndarray, kinds: np.ndarray, payload: np.ndarray, int_kinds: np.ndarray,
                         pair_kinds: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """:func:`key_owners` with the partition module's column hashes (``int_elements``,
    ``combine``, ``finish``)."""
    from ..partition import combine, finish, int_elements

    owners = np.full(len(ids), -1, dtype=np.int64)
    k = kinds[ids]
    ints = np.isin(k, int_kinds)
    owners[ints] = finish(int_elements(payload[ids[ints]])) % count
    pairs = np.flatnonzero(np.isin(k, pair_kinds))
    codes = payload[ids[pairs]]
    a, b = codes >> _SHIFT, codes & _LOW
    plain = np.isin(kinds[a], int_kinds) & np.isin(kinds[b], int_kinds)
    elements = combine(int_elements(payload[a[plain]]), int_elements(payload[b[plain]]))
    owners[pairs[plain]] = finish(elements) % count
    return owners, int((owners == -1).sum())
