"""Batches of updates decoded from msgpack straight into columns, without a Python object per update.

ddflow's input format (the daemon's ``msgpack`` inputs) sends a batch of updates as one msgpack array
of ``[data, time, diff]`` arrays, ``data`` an array of the input's fields. When every field is
declared, :func:`unpack_batch` reads such a message in one pass and returns its columns; anything
else (a single update, a progress marker, a value of the wrong type, a zero diff, an int outside
int64, a truncated or over-long message) makes it answer :data:`FALLBACK`, and the caller decodes the
message the general way, which names each problem. The kernel therefore never judges a message bad:
it only recognises the common, valid case.

Field kinds: :data:`INT` (any msgpack integer within int64), :data:`FLOAT` (float32, float64, or an
integer within int64, converted as Python's ``float(int)`` does), :data:`BOOL` (``true``/``false``),
:data:`STR` (a msgpack str), :data:`BYTES` (a msgpack bin), :data:`ANY` (any msgpack value whose
containers nest at most :data:`MAX_NESTING` deep). Integers outside int64 fall back (Python keeps
them as big ints, the general path decides). Values of the last three kinds become Python objects
in any case, so the kernel copies their bytes, field by field, into one msgpack array per field
(``blob``), which msgpack's own decoder turns into a column in one call (:func:`value_columns`):
a list of values per field, and no Python object per update.

:func:`unpack_columns` (the kernel and the value columns) states its contract once more with
``msgpack.unpackb`` in :func:`unpack_batch_reference`.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from . import helper, kernel

INT, FLOAT, BOOL, STR, BYTES, ANY = 0, 1, 2, 3, 4, 5
OK, FALLBACK = 0, 1
MAX_NESTING = 256  # an ANY value with containers nested deeper falls back (msgpack's own limit is higher)

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


@helper
def _length(buf, pos, size):
    """``(length, next position)``: the ``size``-byte big-endian length at ``pos`` (-1 if truncated)."""
    if pos + size > buf.shape[0]:
        return np.int64(-1), pos
    return np.int64(_big_endian(buf, pos, size)), pos + size


@helper
def _string_end(buf, pos, kind):
    """The position after the msgpack str (``kind`` STR) or bin (BYTES) at ``pos``, or -1 if the
    value is not one, or is truncated."""
    n = buf.shape[0]
    if pos >= n:
        return np.int64(-1)
    b = buf[pos]
    size = np.int64(-1)
    nxt = pos + 1
    if kind == STR:
        if 0xA0 <= b <= 0xBF:
            size = np.int64(b - 0xA0)
        elif 0xD9 <= b <= 0xDB:
            size, nxt = _length(buf, pos + 1, 1 << (b - 0xD9))
    elif 0xC4 <= b <= 0xC6:
        size, nxt = _length(buf, pos + 1, 1 << (b - 0xC4))
    if size < 0 or nxt + size > n:
        return np.int64(-1)
    return nxt + size


@helper
def _value_end(buf, pos, stack):
    """The position after the one msgpack value at ``pos`` (of any type), or -1 if it is not one, is
    truncated, or nests containers deeper than ``len(stack) - 1`` (``stack``: int64 scratch)."""
    n = buf.shape[0]
    depth = 0
    stack[0] = 1  # values still to read at each depth
    while depth >= 0:
        if stack[depth] == 0:
            depth -= 1
            continue
        stack[depth] -= 1
        if pos >= n:
            return np.int64(-1)
        b = buf[pos]
        items = np.int64(0)  # the values a container holds
        if b <= 0x7F or b >= 0xE0 or b == 0xC0 or b == 0xC2 or b == 0xC3:
            pos += 1
        elif b <= 0x8F:
            items, pos = 2 * np.int64(b - 0x80), pos + 1
        elif b <= 0x9F:
            items, pos = np.int64(b - 0x90), pos + 1
        elif b <= 0xBF:
            pos += 1 + np.int64(b - 0xA0)
        elif b == 0xC1:
            return np.int64(-1)
        elif b <= 0xC6 or 0xD9 <= b <= 0xDB:  # bin 8/16/32, str 8/16/32
            size, pos = _length(buf, pos + 1, 1 << (b - (0xC4 if b <= 0xC6 else 0xD9)))
            if size < 0:
                return np.int64(-1)
            pos += size
        elif b <= 0xC9:  # ext 8/16/32: length, type, data
            size, pos = _length(buf, pos + 1, 1 << (b - 0xC7))
            if size < 0:
                return np.int64(-1)
            pos += 1 + size
        elif b <= 0xCB:  # float 32/64
            pos += 5 if b == 0xCA else 9
        elif b <= 0xD3:  # uint/int 8..64
            pos += 1 + (1 << ((b - 0xCC) & 3))
        elif b <= 0xD8:  # fixext 1..16: type, data
            pos += 2 + (1 << (b - 0xD4))
        else:  # 0xDC..0xDF: array 16/32, map 16/32
            size, pos = _length(buf, pos + 1, 2 if b == 0xDC or b == 0xDE else 4)
            if size < 0:
                return np.int64(-1)
            items = size if b <= 0xDD else 2 * size
        if pos > n:
            return np.int64(-1)
        if items > 0:
            if items > n - pos or depth + 1 >= stack.shape[0]:  # every value takes a byte at least
                return np.int64(-1)
            depth += 1
            stack[depth] = items
    return pos


@kernel
def unpack_batch(buf: np.ndarray, kinds: np.ndarray):
    """Decode one message (``buf``: its bytes as uint8) that is a msgpack array of updates
    ``[data, time, diff]``, ``data`` an array of ``len(kinds)`` fields of the given kinds.

    Returns ``(status, ints, floats, times, diffs, blob, bounds)``: with status :data:`OK`, ``ints``
    (k, n) int64 holds the INT fields (BOOL ones as 0/1) and ``floats`` (k, n) float64 the FLOAT
    fields, row ``j`` for field ``j`` (the other kind's row is left unset), ``times`` and ``diffs``
    (n,) int64, every diff non-zero, in the message's order; ``blob[bounds[j]:bounds[j + 1]]`` is,
    for a STR, BYTES or ANY field ``j``, a msgpack array of its n values, their bytes as in the
    message (empty for the other kinds). :data:`FALLBACK` (the arrays then empty) for anything
    else, including a message with bytes after the array. A STR value's bytes are not checked to be
    UTF-8 here: msgpack's decoder checks them (:func:`value_columns`)."""
    k = kinds.shape[0]
    n_bytes = buf.shape[0]
    count, pos = _array_header(buf, 0)
    empty_i = np.empty((k, 0), dtype=np.int64)
    empty_f = np.empty((k, 0), dtype=np.float64)
    empty = np.empty(0, dtype=np.int64)
    no_blob = np.empty(0, dtype=np.uint8)
    no_bounds = np.zeros(k + 1, dtype=np.int64)
    # every update takes at least 3 + k bytes: a count beyond that is a lie (or a single update)
    if count < 0 or count * (3 + k) > n_bytes:
        return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
    ints = np.empty((k, count), dtype=np.int64)
    floats = np.empty((k, count), dtype=np.float64)
    times = np.empty(count, dtype=np.int64)
    diffs = np.empty(count, dtype=np.int64)
    bits64 = np.empty(1, dtype=np.uint64)
    bits32 = np.empty(1, dtype=np.uint32)
    objects = 0  # fields of the STR, BYTES and ANY kinds: their values' spans in the message
    for j in range(k):
        if kinds[j] >= STR:
            objects += 1
    starts = np.empty((k, count if objects else 0), dtype=np.int64)
    ends = np.empty((k, count if objects else 0), dtype=np.int64)
    stack = np.empty(MAX_NESTING + 1, dtype=np.int64)
    for i in range(count):
        size, pos = _array_header(buf, pos)
        if size != 3:
            return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
        fields, pos = _array_header(buf, pos)
        if fields != k:
            return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
        for j in range(k):
            kind = kinds[j]
            if kind == INT:
                ok, v, pos = _int(buf, pos)
                if not ok:
                    return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
                ints[j, i] = v
            elif kind == FLOAT:
                ok, x, pos = _float(buf, pos, bits64, bits32)
                if not ok or not np.isfinite(x):  # infinities and NaN: refused by the validator
                    return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
                floats[j, i] = x
            elif kind == BOOL:
                if pos >= n_bytes or (buf[pos] != 0xC2 and buf[pos] != 0xC3):
                    return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
                ints[j, i] = np.int64(buf[pos] == 0xC3)
                pos += 1
            else:
                end = _value_end(buf, pos, stack) if kind == ANY else _string_end(buf, pos, kind)
                if end < 0:
                    return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
                starts[j, i] = pos
                ends[j, i] = end
                pos = end
        ok, t, pos = _int(buf, pos)
        if not ok:
            return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
        ok, d, pos = _int(buf, pos)
        if not ok or d == 0:
            return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
        times[i] = t
        diffs[i] = d
    if pos != n_bytes:
        return FALLBACK, empty_i, empty_f, empty, empty, no_blob, no_bounds
    bounds = np.zeros(k + 1, dtype=np.int64)
    for j in range(k):
        size = 0
        if kinds[j] >= STR:
            size = 5
            for i in range(count):
                size += ends[j, i] - starts[j, i]
        bounds[j + 1] = bounds[j] + size
    blob = np.empty(bounds[k], dtype=np.uint8)
    for j in range(k):
        if kinds[j] >= STR:
            at = bounds[j]
            blob[at] = 0xDD  # array 32: the count, big-endian
            for b in range(4):
                blob[at + 1 + b] = (count >> (8 * (3 - b))) & 0xFF
            at += 5
            for i in range(count):
                for p in range(starts[j, i], ends[j, i]):
                    blob[at] = buf[p]
                    at += 1
    return OK, ints, floats, times, diffs, blob, bounds


def value_columns(blob: np.ndarray, bounds: np.ndarray, kinds: list[int]) -> list[list | None] | None:
    """The STR, BYTES and ANY fields of an :func:`unpack_batch` result as lists of values (None for
    the other fields), decoded by msgpack in one call per field (arrays as tuples, as the general
    decoder reads them); None if a field does not decode (a str that is not UTF-8, say)."""
    out: list[list | None] = []
    data = blob.tobytes()
    for j, kind in enumerate(kinds):
        if kind < STR:
            out.append(None)
            continue
        try:
            out.append(list(msgpack.unpackb(data[bounds[j]:bounds[j + 1]], raw=False, use_list=False,
                                            strict_map_key=False)))
        except Exception:  # noqa: BLE001 - any undecodable value falls back, as the whole message would
            return None
    return out


def unpack_columns(value: bytes, kinds: np.ndarray) -> tuple[int, list, np.ndarray, np.ndarray]:
    """One batch message decoded into columns: ``(OK, columns, times, diffs)``, ``columns[j]`` field
    ``j``'s values (an int64 array for INT, a list otherwise), or ``(FALLBACK, [], empty, empty)``
    (see :func:`unpack_batch`)."""
    status, ints, floats, times, diffs, blob, bounds = unpack_batch(np.frombuffer(value, dtype=np.uint8), kinds)
    kind_list = kinds.tolist()
    objects = value_columns(blob, bounds.tolist(), kind_list) if status == OK else None
    if objects is None:
        return FALLBACK, [], times[:0], diffs[:0]
    columns: list = [ints[j] if kind == INT else floats[j].tolist() if kind == FLOAT
                     else ints[j].astype(bool).tolist() if kind == BOOL else objects[j]
                     for j, kind in enumerate(kind_list)]
    return OK, columns, times, diffs


def _nesting(value: Any) -> int:
    """How deep containers nest in ``value`` (0 for a scalar or an empty container)."""
    if type(value) is tuple and value:
        return 1 + max(map(_nesting, value))
    if type(value) is dict and value:
        return 1 + max(_nesting(v) for item in value.items() for v in item)
    return 0


def unpack_batch_reference(value: bytes, kinds: list[int]) -> tuple[int, list] | tuple[int, None]:
    """The contract of :func:`unpack_columns` with ``msgpack.unpackb``: ``(OK, updates)`` with each
    update ``(data tuple, time, diff)`` (every field as a Python value), or ``(FALLBACK, None)``."""
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
            if (kind == BOOL and type(v) is bool or kind == INT and type(v) is int and -(1 << 63) <= v <= _I64_MAX
                    or kind == FLOAT and type(v) is float and math.isfinite(v) or kind == STR and type(v) is str
                    or kind == BYTES and type(v) is bytes or kind == ANY and _nesting(v) <= MAX_NESTING):
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
