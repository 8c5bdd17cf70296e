"""Interning by collision rounds: the ids of ``(round, record)`` pairs and the groups records claim.

A record's id is the stable hash of the pair ``(round, record)`` (``key_hash``, see
:mod:`ddflow.operators.partition`), starting at round zero. The records whose round-zero hashes are
equal form a *group*; a group that only ever held one record gives it that hash as its id, whatever
else happens (a round-zero pair is the least of any hash group it meets). Only groups that held two
records or more need the collision rounds, so the bulk of a batch is decided by two passes:

* :func:`pair_hashes`: ``key_hash((round, record))`` modulo ``modulus`` from the record's element
  hash (``Interner.element_hashes``), the same value :func:`~ddflow.operators.partition.key_hash`
  gives the pair, computed without a Python object (:func:`pair_hashes_into`: over the element
  hashes, in place);
* :func:`claim`: every group takes the first record seen in it, and a group that sees a second,
  different record becomes ``MULTI`` (its records go through the rounds from then on).

Each compiled kernel has a plain reference beside it (``ref_*``); the property tests in
``tests/kernels`` hold them to each other.
"""

from __future__ import annotations

import numba
import numpy as np

from . import helper, kernel

_inline = numba.njit(inline="always", cache=True, nogil=True)  # helpers of the kernels, inlined into them

SINGLE, MULTI, WATCHED = 0, 1, 2  # a group's status (see :func:`claim`)

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P5 = np.uint64(2870177450012600261)
_LEN1 = np.uint64(1 ^ 2870177450012600261 ^ 3527539)
_LEN2 = np.uint64(2 ^ 2870177450012600261 ^ 3527539)
_MOD61 = np.uint64((1 << 61) - 1)
_MASK63 = np.uint64((1 << 63) - 1)


@_inline
def _int_hash(x: int) -> np.uint64:
    """CPython's hash of the int ``x`` (int64), as the unsigned lane a tuple hash adds."""
    if x < 0:
        h = -np.int64(np.uint64(-(x + 1)) % _MOD61 + np.uint64(1)) if x == -(2**63) else -np.int64(np.uint64(-x) % _MOD61)
        if h == -1:
            h = np.int64(-2)
        return np.uint64(h)
    return np.uint64(x) % _MOD61


@_inline
def _lane(acc: np.uint64, lane: np.uint64) -> np.uint64:
    acc = acc + lane * _P2
    acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
    return acc * _P1


@kernel
def pair_hashes(round_: int, elements: np.ndarray, modulus: int) -> np.ndarray:
    """``key_hash((round_, x)) % modulus`` for each record ``x`` whose element hash is ``elements[i]``
    (``0 <= round_ < 2**61 - 1``; ``modulus`` 0 for none, the full 63-bit hash).

    ``key_hash`` of a pair is CPython's hash of the 1-tuple of ``hash((round_, e))``, its top bit
    cleared: CPython hashes an int modulo ``2**61 - 1`` keeping its sign (``-1`` becomes ``-2``) and
    combines a tuple's item hashes xxHash-style."""
    return _pair_hashes(round_, elements, modulus, np.empty(elements.shape[0], dtype=np.int64))


@kernel
def pair_hashes_into(round_: int, elements: np.ndarray, modulus: int) -> np.ndarray:
    """:func:`pair_hashes` written over ``elements`` (returned): a caller that gives its column of
    element hashes up saves a column."""
    return _pair_hashes(round_, elements, modulus, elements)


@helper
def _pair_hashes(round_: int, elements: np.ndarray, modulus: int, out: np.ndarray) -> np.ndarray:
    """The body of :func:`pair_hashes`, the hash of ``elements[i]`` written into ``out[i]`` (``out`` may
    be ``elements``)."""
    n = elements.shape[0]
    r = _int_hash(round_)
    for i in range(n):
        acc = _lane(_lane(_P5, r), _int_hash(elements[i])) + _LEN2
        t = np.int64(acc)
        if t == -1:
            t = 1546275796
        k = np.int64((_lane(_P5, _int_hash(t)) + _LEN1) & _MASK63)
        if modulus > 0:
            k = k % modulus
        out[i] = k
    return out


@kernel
def claim(groups: np.ndarray, records: np.ndarray, first: np.ndarray, status: np.ndarray) -> np.ndarray:
    """Groups take their records, in order: for each ``i``, group ``g = groups[i]`` with no record yet
    (``first[g] < 0``) takes ``records[i]`` as its first; a group whose first record is not
    ``records[i]`` becomes ``MULTI`` (``status[g]``), unless it already is.

    ``first`` (int32) and ``status`` (int8) are written in place. Returns the groups that became ``MULTI`` in this
    call, in the order they did (each once)."""
    out = np.empty(groups.shape[0], dtype=np.int64)
    n = 0
    for i in range(groups.shape[0]):
        g = groups[i]
        r = records[i]
        f = first[g]
        if f < 0:
            first[g] = r
        elif f != r and status[g] != MULTI:
            status[g] = MULTI
            out[n] = g
            n += 1
    return out[:n].copy()


@kernel
def add_counts(groups: np.ndarray, diffs: np.ndarray, status: np.ndarray, counts: np.ndarray) -> None:
    """``counts[groups[i]] += diffs[i]`` for every ``i`` whose group is not ``MULTI`` (wrapping)."""
    for i in range(groups.shape[0]):
        g = groups[i]
        if status[g] != MULTI:
            counts[g] += diffs[i]


# -- references ------------------------------------------------------------------------------------
def ref_pair_hashes(round_: int, elements: np.ndarray, modulus: int) -> np.ndarray:
    """:func:`pair_hashes` by CPython's own hashes: ``hash((hash((round_, e)),)) & (2**63 - 1)``."""
    mask = (1 << 63) - 1
    out = [hash((hash((round_, e)),)) & mask for e in elements.tolist()]
    return np.array([h % modulus if modulus else h for h in out], dtype=np.int64)


def ref_claim(groups: np.ndarray, records: np.ndarray, first: np.ndarray, status: np.ndarray) -> np.ndarray:
    """:func:`claim` one update at a time over lists."""
    became = []
    for g, r in zip(groups.tolist(), records.tolist()):
        if first[g] < 0:
            first[g] = r
        elif first[g] != r and status[g] != MULTI:
            status[g] = MULTI
            became.append(g)
    return np.array(became, dtype=np.int64)


def ref_add_counts(groups: np.ndarray, diffs: np.ndarray, status: np.ndarray, counts: np.ndarray) -> None:
    """:func:`add_counts` one update at a time (int64 wrap-around as the kernel's)."""
    for g, d in zip(groups.tolist(), diffs.tolist()):
        if status[g] != MULTI:
            counts[g] = np.int64((int(counts[g]) + d + 2**63) % 2**64 - 2**63)
