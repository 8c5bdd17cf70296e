"""Partitioning by key: the one stable hash that decides where a key lives.

``key_hash(value)`` is a 63-bit hash computed from the value alone, never from a salted hash (str
and bytes), so it is the same in every process, run and host. Everything that places a record by
its key uses it: the worker that owns a key (``key_hash(key) % workers``), the exchange that routes
updates to their owners, checkpoint and backfill shards, the partitions of result and input topics,
and the library's interning ids. A record's key is its first field (``record_key``); a record that
is not a tuple is its own key.

The hash follows equality as the engine sees it: equal values hash equally, so ``True``, ``1`` and
``1.0`` (one record to the interner) have one hash. It is defined through an *element hash* ``e``:

    number (int, bool, float)   e = Python's numeric hash (``n mod (2**61 - 1)`` with the sign,
                                    ``-1`` gives ``-2``; defined for every number, equal for equal ones);
                                    NaN: 0
    str / bytes                 e = blake2b-64 of the UTF-8 / the bytes (person ``ddflow/s`` / ``ddflow/b``),
                                    as a signed little-endian int64
    None                        e = 0x6464666C6F77 (a constant)
    tuple (x1, ..., xk)         e = the xxHash-style combination CPython applies to a tuple (3.8 and later),
                                    over the lanes ``e(x1) .. e(xk)``: for tuples of numbers it is
                                    Python's own ``hash(tuple)``, computed in C
    frozenset                   e = CPython's frozenset hash of ``{e(x) : x in it}``
    key_hash(value)             the 1-lane combination of ``e(value)``, its top bit cleared

The last step mixes every bit of ``e`` into the low ones, so ``% workers`` spreads keys that share
a residue (even node ids, multiples of a stride). Other types have no stable hash and raise
:class:`~ddflow.operators.errors.ShapeError`. ``int_elements``, ``combine`` and ``finish``
compute the same values on numpy columns (for keys the interner holds as ints and pairs); the tests
pin the values and hold the two implementations to each other.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Iterable

import numpy as np

from .errors import ShapeError

__all__ = [
    "HASH_NAME",
    "combine",
    "element_hash",
    "finish",
    "int_elements",
    "key_hash",
    "key_hashes",
    "partition_of",
    "record_hash",
    "record_key",
]

HASH_NAME = "ddflow-key-hash/1"  # recorded where the hash is persisted (snapshot manifests)

_MASK63 = (1 << 63) - 1
_NONE = 0x6464666C6F77
_NUMBERS = frozenset((int, bool, float))


def _blake(data: bytes, person: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little", signed=True)


def element_hash(value: object) -> int:
    """The element hash ``e(value)`` of the module's definition (a signed int64)."""
    kind = type(value)
    if kind is int or kind is bool:
        return hash(value)
    if kind is str:
        return _blake(value.encode("utf-8", "surrogatepass"), b"ddflow/s")
    if kind is tuple or isinstance(value, tuple):
        for x in value:
            if type(x) not in _NUMBERS or (type(x) is float and math.isnan(x)):
                return hash(tuple([element_hash(x) for x in value]))
        return hash(tuple(value))  # numbers only: CPython's tuple hash of their numeric hashes
    if kind is float:
        return 0 if math.isnan(value) else hash(value)
    if kind is bytes:
        return _blake(value, b"ddflow/b")
    if value is None:
        return _NONE
    if isinstance(value, (int, float)):  # IntEnum and friends equal their number
        return element_hash(float(value) if isinstance(value, float) else int(value))
    if isinstance(value, str):
        return element_hash(str(value))
    if isinstance(value, frozenset):
        return hash(frozenset([element_hash(x) for x in value]))
    raise ShapeError(
        f"{type(value).__name__} value {value!r:.80} has no stable key hash: keys that are partitioned "
        "(workers, shards, topic partitions) must be None, bool, int, float, str, bytes, or tuples and "
        "frozensets of them"
    )


def key_hash(value: Hashable) -> int:
    """The stable 63-bit hash of ``value`` (``0 <= key_hash(value) < 2**63``); equal values hash equally."""
    kind = type(value)
    if kind is int:
        return hash((value,)) & _MASK63
    if kind is tuple and len(value) == 2:
        a, b = value
        if type(a) is int and type(b) is int:
            return hash((hash(value),)) & _MASK63
    return hash((element_hash(value),)) & _MASK63


def record_key(record: object) -> object:
    """The key a record is placed by: its first field (the record itself if it is not a tuple)."""
    return record[0] if type(record) is tuple and record else record


def record_hash(record: object) -> int:
    """``key_hash(record_key(record))``."""
    return key_hash(record_key(record))


def partition_of(record: object, partitions: int) -> int:
    """The partition (worker, shard, topic partition) of ``record`` among ``partitions``: its key's
    hash modulo ``partitions``."""
    return key_hash(record_key(record)) % partitions


def key_hashes(keys: Iterable[Hashable]) -> np.ndarray:
    """``key_hash`` of each key, as an int64 array."""
    return np.fromiter(map(key_hash, keys), dtype=np.int64)


# -- the same hash on columns -----------------------------------------------------------------------

_MODULUS = np.uint64((1 << 61) - 1)
_PRIME_1 = np.uint64(11400714785074694791)
_PRIME_2 = np.uint64(14029467366897019727)
_PRIME_5 = np.uint64(2870177450012600261)
_LEN_SALT = 2870177450012600261 ^ 3527539


def int_elements(values: np.ndarray) -> np.ndarray:
    """The element hashes (int64) of an int64 column of ints: Python's numeric hash, vectorized."""
    values = values.astype(np.int64, copy=False)
    negative = values < 0
    magnitude = np.where(negative, (-values).view(np.uint64), values.view(np.uint64))  # -(-2**63) wraps right
    h = (magnitude % _MODULUS).astype(np.int64)
    h = np.where(negative, -h, h)
    h[h == -1] = -2
    return h


def combine(*lanes: np.ndarray) -> np.ndarray:
    """The element hashes (int64) of tuples from the element hashes of their items (one column per
    position): CPython's tuple hash of a tuple of those ints, vectorized."""
    with np.errstate(over="ignore"):
        acc = np.full(len(lanes[0]), _PRIME_5, dtype=np.uint64)
        for lane in lanes:
            acc += int_elements(lane).view(np.uint64) * _PRIME_2  # CPython hashes each item: an int
            acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
            acc *= _PRIME_1
        acc += np.uint64(len(lanes) ^ _LEN_SALT)
    out = acc.view(np.int64)
    out[out == -1] = 1546275796
    return out


def finish(elements: np.ndarray) -> np.ndarray:
    """``key_hash`` (int64, non-negative) from element hashes."""
    return combine(elements) & np.int64(_MASK63)
