"""Batches of updates decoded from msgpack straight into columns, without a Python object per update.

ddflow's input format (the daemon's ``msgpack`` inputs) sends a batch of updates as one msgpack array
of ``[data, time, diff]`` arrays, ``data`` an array of the input's fields. When every field is
declared ``int``, ``float`` or ``bool``, :func:`unpack_batch` reads such a message in one pass and
returns its columns; anything else (a single update, a progress marker, a field of another type, a
value of the wrong type, a zero diff, an int outside int64, a truncated or over-long message) makes
it answer :data:`FALLBACK`, and the caller decodes the message the general way, which names each
problem. The kernel therefore never judges a message bad: it only recognises the common, valid case.

Field kinds: :data:`INT` (any msgpack integer within int64), :data:`FLOAT` (float32, float64, or an
integer within int64, converted as Python's ``float(int)`` does), :data:`BOOL` (``true``/``false``).
Integers outside int64 fall back (Python keeps them as big ints, the general path decides).

:func:`unpack_batch_reference` states the same contract with ``msgpack.unpackb``.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from . import helper, kernel

INT, FLOAT, BOOL = 0, 1, 2
OK, FALLBACK = 0, 1

_I64_MAX = (1 << 63) - 1


@helper
def _array_header(buf, pos):
    """``(length, next position)`` of the array starting at ``pos``; length -1 if it is not an array
    (or is truncated)."""
    n = buf.shape[0]
    if pos >= n:
        return -1, pos
    b = buf[pos]
    if 0x90 <= b <= 0x9F:
        return np.int64(b - 0x90), pos + 1
    if b == 0xDC:
        if pos + 3 > n:
            return -1, pos
        return (np.int64(buf[pos + 1]) << 8) | np.int64(buf[pos + 2]), pos + 3
    if b == 0xDD:
        if pos + 5 > n:
            return -1, pos
        v = np.int64(0)
        for j in range(1, 5):
            v = (v << 8) | np.int64(buf[pos + j])
        return v, pos + 5
    return -1, pos


@helper
def _big_endian(buf, pos, size):
    """The ``size`` bytes at ``pos`` as an unsigned big-endian integer, in a uint64."""
    v = np.uint64(0)
    for j in range(size):
        v = (v << np.uint64(8)) | np.uint64(buf[pos + j])
    return v


@helper
def _int(buf, pos):
    """``(ok, value, next position)`` of a msgpack integer within int64 at ``pos``."""
    n = buf.shape[0]
    if pos >= n:
        return False, np.int64(0), pos
    b = buf[pos]
    if b <= 0x7F:
        return True, np.int64(b), pos + 1
    if b >= 0xE0:
        return True, np.int64(b) - 256, pos + 1
    if 0xCC <= b <= 0xCF:  # uint 8/16/32/64
        size = 1 << (b - 0xCC)
        if pos + 1 + size > n:
            return False, np.int64(0), pos
        v = _big_endian(buf, pos + 1, size)
        if v > np.uint64(_I64_MAX):
            return False, np.int64(0), pos
        return True, np.int64(v), pos + 1 + size
    if 0xD0 <= b <= 0xD3:  # int 8/16/32/64
        size = 1 << (b - 0xD0)
        if pos + 1 + size > n:
            return False, np.int64(0), pos
        v = _big_endian(buf, pos + 1, size)
        bits = 8 * size
        if bits < 64 and (v >> np.uint64(bits - 1)) & np.uint64(1):
            return True, np.int64(v) - (np.int64(1) << bits), pos + 1 + size
        return True, np.int64(v), pos + 1 + size  # 64 bits: the two's complement reinterpretation
    return False, np.int64(0), pos


@helper
def _float(buf, pos, bits64, bits32):
    """``(ok, value, next position)`` of a msgpack float (or an integer within int64) at ``pos``;
    ``bits64``/``bits32``: one-element scratch arrays whose float views reinterpret the bits."""
    n = buf.shape[0]
    if pos >= n:
        return False, 0.0, pos
    b = buf[pos]
    if b == 0xCB:
        if pos + 9 > n:
            return False, 0.0, pos
        bits64[0] = _big_endian(buf, pos + 1, 8)
        return True, bits64.view(np.float64)[0], pos + 9
    if b == 0xCA:
        if pos + 5 > n:
            return False, 0.0, pos
        bits32[0] = np.uint32(_big_endian(buf, pos + 1, 4))
        return True, np.float64(bits32.view(np.float32)[0]), pos + 5
    ok, v, nxt = _int(buf, pos)
    return ok, np.float64(v), nxt


@kernel
def unpack_batch(buf: np.ndarray, kinds: np.ndarray):
    """Decode one message (``buf``: its bytes as uint8) that is a msgpack array of updates
    ``[data, time, diff]``, ``data`` an array of ``len(kinds)`` fields of the given kinds.

    Returns ``(status, ints, floats, times, diffs)``: with status :data:`OK`, ``ints`` (k, n) int64
    holds the INT fields (BOOL ones as 0/1) and ``floats`` (k, n) float64 the FLOAT fields, row ``j``
    for field ``j`` (the other kind's row is left unset), ``times`` and ``diffs`` (n,) int64, every
    diff non-zero, in the message's order. :data:`FALLBACK` (the arrays then empty) for anything else,
    including a message with bytes after the array."""
    k = kinds.shape[0]
    n_bytes = buf.shape[0]
    count, pos = _array_header(buf, 0)
    empty_i = np.empty((k, 0), dtype=np.int64)
    empty_f = np.empty((k, 0), dtype=np.float64)
    empty = np.empty(0, dtype=np.int64)
    # every update takes at least 3 + k bytes: a count beyond that is a lie (or a single update)
    if count < 0 or count * (3 + k) > n_bytes:
        return FALLBACK, empty_i, empty_f, empty, empty
    ints = np.empty((k, count), dtype=np.int64)
    floats = np.empty((k, count), dtype=np.float64)
    times = np.empty(count, dtype=np.int64)
    diffs = np.empty(count, dtype=np.int64)
    bits64 = np.empty(1, dtype=np.uint64)
    bits32 = np.empty(1, dtype=np.uint32)
    for i in range(count):
        size, pos = _array_header(buf, pos)
        if size != 3:
            return FALLBACK, empty_i, empty_f, empty, empty
        fields, pos = _array_header(buf, pos)
        if fields != k:
            return FALLBACK, empty_i, empty_f, empty, empty
        for j in range(k):
            kind = kinds[j]
            if kind == INT:
                ok, v, pos = _int(buf, pos)
                if not ok:
                    return FALLBACK, empty_i, empty_f, empty, empty
                ints[j, i] = v
            elif kind == FLOAT:
                ok, x, pos = _float(buf, pos, bits64, bits32)
                if not ok or not np.isfinite(x):  # infinities and NaN: refused by the validator
                    return FALLBACK, empty_i, empty_f, empty, empty
                floats[j, i] = x
            else:
                if pos >= n_bytes or (buf[pos] != 0xC2 and buf[pos] != 0xC3):
                    return FALLBACK, empty_i, empty_f, empty, empty
                ints[j, i] = np.int64(buf[pos] == 0xC3)
                pos += 1
        ok, t, pos = _int(buf, pos)
        if not ok:
            return FALLBACK, empty_i, empty_f, empty, empty
        ok, d, pos = _int(buf, pos)
        if not ok or d == 0:
            return FALLBACK, empty_i, empty_f, empty, empty
        times[i] = t
        diffs[i] = d
    if pos != n_bytes:
        return FALLBACK, empty_i, empty_f, empty, empty
    return OK, ints, floats, times, diffs


def unpack_batch_reference(value: bytes, kinds: list[int]) -> tuple[int, list] | tuple[int, None]:
    """The contract of :func:`unpack_batch` with ``msgpack.unpackb``: ``(OK, updates)`` with each
    update ``(data tuple, time, diff)`` (int, float and bool fields as Python values), or
    ``(FALLBACK, None)``."""
    try:
        obj = msgpack.unpackb(value, raw=False, use_list=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - any undecodable message falls back, as the kernel's does
        return FALLBACK, None
    if type(obj) is not tuple:
        return FALLBACK, None
    out = []
    for item in obj:
        if type(item) is not tuple or len(item) != 3 or type(item[0]) is not tuple or len(item[0]) != len(kinds):
            return FALLBACK, None
        data, t, d = item
        row = []
        for kind, v in zip(kinds, data, strict=True):
            if kind == BOOL and type(v) is bool or kind == INT and type(v) is int and -(1 << 63) <= v <= _I64_MAX or kind == FLOAT and type(v) is float and math.isfinite(v):
                row.append(v)
            elif kind == FLOAT and type(v) is int and -(1 << 63) <= v <= _I64_MAX:
                row.append(float(v))
            else:
                return FALLBACK, None
        for v in (t, d):
            if type(v) is not int or not -(1 << 63) <= v <= _I64_MAX:
                return FALLBACK, None
        if d == 0:
            return FALLBACK, None
        out.append((tuple(row), t, d))
    return OK, out
