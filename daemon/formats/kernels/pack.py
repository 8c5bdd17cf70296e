"""Updates encoded as msgpack straight from columns, without a Python object per update.

The inverse of :mod:`.unpack`: ddflow's result batches (the daemon's ``msgpack`` outputs) hold an
array of ``[data, time, diff]`` updates. When a batch's records are columns of ``int``, ``float``
or ``bool`` values, :func:`pack_updates` writes the bytes of its updates in one pass, exactly as
``msgpack.packb`` writes each ``[data, time, diff]`` (the smallest encoding of each integer,
float64 for floats, ``true``/``false``): the caller frames them (a map header, the array header)
and the result reads back as if ``packb`` had written the whole batch.

Columns: ``values`` is ``(n, k)`` int64, column ``j`` of kind ``kinds[j]``: :data:`INT` (the value),
:data:`FLOAT` (the int64 holds the float64's bits: ``floats.view(np.int64)``), :data:`BOOL` (0 or
1). With ``scalar`` (``k == 1``), ``data`` is that one value instead of an array of ``k`` values (a
record that is a plain int, not a tuple). :func:`pack_updates_reference` states the contract with
``msgpack.packb``.
"""

from __future__ import annotations

import msgpack
import numpy as np

from . import helper, kernel
from .unpack import BOOL, FLOAT, INT

__all__ = ["INT", "FLOAT", "BOOL", "pack_updates", "pack_updates_reference", "max_packed_size"]


def max_packed_size(n: int, k: int) -> int:
    """An upper bound of the bytes :func:`pack_updates` writes for ``n`` updates of ``k`` fields."""
    return n * (1 + 5 + 9 * k + 9 + 9)


@helper
def _put_be(out, pos, v, size):
    """Write the low ``size`` bytes of the uint64 ``v`` big-endian at ``pos``; the next position."""
    for j in range(size):
        out[pos + j] = np.uint8((v >> np.uint64(8 * (size - 1 - j))) & np.uint64(0xFF))
    return pos + size


@helper
def _put_int(out, pos, v):
    """``v`` (int64) as msgpack writes a Python int: the smallest encoding; the next position."""
    if v >= 0:
        if v <= 0x7F:
            out[pos] = np.uint8(v)
            return pos + 1
        if v <= 0xFF:
            out[pos] = 0xCC
            return _put_be(out, pos + 1, np.uint64(v), 1)
        if v <= 0xFFFF:
            out[pos] = 0xCD
            return _put_be(out, pos + 1, np.uint64(v), 2)
        if v <= 0xFFFFFFFF:
            out[pos] = 0xCE
            return _put_be(out, pos + 1, np.uint64(v), 4)
        out[pos] = 0xCF
        return _put_be(out, pos + 1, np.uint64(v), 8)
    if v >= -32:
        out[pos] = np.uint8(v & 0xFF)
        return pos + 1
    if v >= -128:
        out[pos] = 0xD0
        return _put_be(out, pos + 1, np.uint64(v & 0xFF), 1)
    if v >= -32768:
        out[pos] = 0xD1
        return _put_be(out, pos + 1, np.uint64(v & 0xFFFF), 2)
    if v >= -2147483648:
        out[pos] = 0xD2
        return _put_be(out, pos + 1, np.uint64(v & 0xFFFFFFFF), 4)
    out[pos] = 0xD3
    return _put_be(out, pos + 1, np.uint64(v), 8)


@helper
def _put_array_header(out, pos, n):
    if n <= 15:
        out[pos] = np.uint8(0x90 + n)
        return pos + 1
    if n <= 0xFFFF:
        out[pos] = 0xDC
        return _put_be(out, pos + 1, np.uint64(n), 2)
    out[pos] = 0xDD
    return _put_be(out, pos + 1, np.uint64(n), 4)


@kernel
def pack_updates(values: np.ndarray, kinds: np.ndarray, scalar: bool, times: np.ndarray, diffs: np.ndarray,
                 out: np.ndarray) -> int:
    """Write the ``n`` updates ``[data_i, times[i], diffs[i]]`` into ``out`` (uint8, at least
    :func:`max_packed_size` bytes) as msgpack, one after the other; returns the bytes written.
    ``data_i`` is row ``i`` of ``values`` (``(n, k)`` int64) read by ``kinds`` (see the module),
    as an array of ``k`` values, or its one value with ``scalar``."""
    n = values.shape[0]
    k = values.shape[1]
    pos = 0
    for i in range(n):
        out[pos] = 0x93
        pos += 1
        if not scalar:
            pos = _put_array_header(out, pos, k)
        for j in range(k):
            kind = kinds[j]
            v = values[i, j]
            if kind == INT:
                pos = _put_int(out, pos, v)
            elif kind == FLOAT:
                out[pos] = 0xCB
                pos = _put_be(out, pos + 1, np.uint64(v), 8)  # the float64's bits, big-endian
            else:
                out[pos] = 0xC3 if v != 0 else 0xC2
                pos += 1
        pos = _put_int(out, pos, times[i])
        pos = _put_int(out, pos, diffs[i])
    return pos


def pack_updates_reference(values: np.ndarray, kinds: list[int], scalar: bool, times: np.ndarray,
                           diffs: np.ndarray) -> bytes:
    """The bytes :func:`pack_updates` writes, by ``msgpack.packb`` of each ``[data, time, diff]``."""
    out = []
    floats = values.view(np.float64) if len(values) else values
    for i in range(len(times)):
        row = []
        for j, kind in enumerate(kinds):
            if kind == INT:
                row.append(int(values[i, j]))
            elif kind == FLOAT:
                row.append(float(floats[i, j]))
            else:
                row.append(bool(values[i, j]))
        data = row[0] if scalar else row
        out.append(msgpack.packb([data, int(times[i]), int(diffs[i])], use_bin_type=True))
    return b"".join(out)
