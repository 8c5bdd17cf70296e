"""unpack_batch (msgpack batches into columns) against its reference and against the daemon's decoder.

Messages are written by a small encoder that picks any valid encoding of each value (an int in
every width that holds it, float32 when exact, 8-, 16- and 32-bit string lengths, 16- and 32-bit
array headers), then corrupted at random (truncated, extended, a byte changed): the kernel (with
its value columns) and the reference must agree on every message, and the daemon's decoder, which
takes the kernel's columns, must decode every message as its general (object by object) path does.
"""

from __future__ import annotations

import math
import struct

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.msgpack import decode_input, decode_objects
from ddflow.daemon.formats.kernels.unpack import (
    ANY,
    BOOL,
    BYTES,
    FALLBACK,
    FLOAT,
    INT,
    MAX_NESTING,
    OK,
    STR,
    unpack_batch,
    unpack_batch_reference,
    unpack_columns,
)

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
KIND_NAMES = {INT: "int", FLOAT: "float", BOOL: "bool", STR: "str", BYTES: "bytes", ANY: "any"}
_SCALARS = st.one_of(st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=4), st.binary(max_size=4),
                     st.booleans(), st.none())
ANY_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=2), inner, max_size=2)),
                          max_leaves=6)


def enc_int(v: int, draw) -> bytes:
    options = []
    if 0 <= v <= 0x7F:
        options.append(bytes([v]))
    if -32 <= v < 0:
        options.append(bytes([v & 0xFF]))
    for code, fmt, lo, hi in ((0xCC, ">B", 0, 255), (0xCD, ">H", 0, 65535), (0xCE, ">I", 0, 2**32 - 1),
                              (0xCF, ">Q", 0, 2**64 - 1), (0xD0, ">b", -128, 127), (0xD1, ">h", -2**15, 2**15 - 1),
                              (0xD2, ">i", -2**31, 2**31 - 1), (0xD3, ">q", -2**63, 2**63 - 1)):
        if lo <= v <= hi:
            options.append(bytes([code]) + struct.pack(fmt, v))
    return draw(st.sampled_from(options))


def enc_array(n: int, draw) -> bytes:
    options = [bytes([0xDC]) + struct.pack(">H", n), bytes([0xDD]) + struct.pack(">I", n)] if n < 65536 else []
    if n < 16:
        options.append(bytes([0x90 + n]))
    return draw(st.sampled_from(options))


def enc_string(kind: int, v, draw) -> bytes:
    data = v.encode() if kind == STR else v
    n = len(data)
    codes = (0xD9, 0xDA, 0xDB) if kind == STR else (0xC4, 0xC5, 0xC6)
    options = [bytes([codes[0], n]), bytes([codes[1]]) + struct.pack(">H", n), bytes([codes[2]]) + struct.pack(">I", n)]
    if kind == STR and n < 32:
        options.append(bytes([0xA0 + n]))
    return draw(st.sampled_from(options)) + data


def enc_value(kind: int, v, draw) -> bytes:
    if kind in (STR, BYTES):
        return enc_string(kind, v, draw)
    if kind == ANY:
        return msgpack.packb(v, use_bin_type=True)
    if kind == BOOL:
        return b"\xc3" if v else b"\xc2"
    if kind == INT or isinstance(v, int):
        return enc_int(v, draw)
    options = [b"\xcb" + struct.pack(">d", v)]
    try:
        if struct.unpack(">f", struct.pack(">f", v))[0] == v:  # exact in float32 (infinities too)
            options.append(b"\xca" + struct.pack(">f", v))
    except OverflowError:
        pass
    return draw(st.sampled_from(options))


def field(kind: int):
    if kind == BOOL:
        return st.booleans()
    if kind == INT:
        return st.one_of(st.integers(-40, 300), I64)
    if kind == STR:
        return st.text(max_size=40)
    if kind == BYTES:
        return st.binary(max_size=40)
    if kind == ANY:
        return ANY_VALUES
    return st.one_of(st.floats(allow_nan=False, width=32), st.floats(allow_nan=False), st.integers(-1000, 1000), I64)


@st.composite
def messages(draw):
    kinds = draw(st.lists(st.sampled_from([INT, FLOAT, BOOL, STR, BYTES, ANY]), min_size=1, max_size=3))
    n = draw(st.integers(0, 12))
    body = enc_array(n, draw)
    for _ in range(n):
        body += enc_array(3, draw) + enc_array(len(kinds), draw)
        for kind in kinds:
            body += enc_value(kind, draw(field(kind)), draw)
        body += enc_int(draw(st.one_of(st.integers(-5, 5), I64)), draw)
        body += enc_int(draw(st.one_of(st.sampled_from([1, -1, 2]), I64)), draw)
    damage = draw(st.sampled_from(["none", "none", "truncate", "extend", "flip"]))
    if damage == "truncate" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif damage == "extend":
        body += draw(st.binary(min_size=1, max_size=3))
    elif damage == "flip" and body:
        i = draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([draw(st.integers(0, 255))]) + body[i + 1:]
    return kinds, body


def kernel_updates(kinds: list[int], body: bytes):
    status, columns, times, diffs = unpack_columns(body, np.array(kinds, dtype=np.int64))
    if status != OK:
        return status, None
    values = [c.tolist() if isinstance(c, np.ndarray) else c for c in columns]
    return status, list(zip(zip(*values), times.tolist(), diffs.tolist()))


def same_value(u, v) -> bool:
    """Equal values of the same types throughout (True is not 1, 1.0 is not 1, NaN is NaN)."""
    if type(u) is not type(v):
        return False
    if type(u) is tuple:
        return len(u) == len(v) and all(map(same_value, u, v))
    if type(u) is dict:
        return list(u) == list(v) and all(map(same_value, u.values(), v.values()))
    return u == v or (type(u) is float and math.isnan(u) and math.isnan(v))


def same(a, b) -> bool:
    """Equal updates, each value of the same type."""
    return len(a) == len(b) and all(x[1:] == y[1:] and same_value(x[0], y[0]) for x, y in zip(a, b, strict=True))


@settings(max_examples=200, deadline=None)
@given(messages())
def test_kernel_and_reference_agree(message):
    kinds, body = message
    got, want = kernel_updates(kinds, body), unpack_batch_reference(body, kinds)
    assert got[0] == want[0]
    if got[0] == OK:
        assert same(got[1], want[1])


@settings(max_examples=200, deadline=None)
@given(messages())
def test_the_decoder_with_columns_decodes_as_the_general_path(message):
    kinds, body = message
    if not body:  # an empty value is refused before decoding
        return
    fmt = InputFormat(fields={f"f{j}": KIND_NAMES[k] for j, k in enumerate(kinds)})
    decoded, general = decode_input(body, fmt), decode_objects(body, fmt._validator)
    assert same(decoded.updates, general.updates)
    assert decoded.malformed == general.malformed and decoded.progress == general.progress
    assert decoded.indexes == general.indexes and decoded.single == general.single


def test_edge_cases():
    ints = np.array([INT, INT], dtype=np.int64)

    def run(obj, kinds=ints):
        return unpack_batch(np.frombuffer(msgpack.packb(obj), dtype=np.uint8), kinds)

    assert run([])[0] == OK and len(run([])[3]) == 0  # an empty batch
    one = run([[[-(2**63), 2**63 - 1], 2**63 - 1, -(2**63)]])
    assert one[0] == OK and one[1][:, 0].tolist() == [-(2**63), 2**63 - 1] and one[3][0] == 2**63 - 1
    same_rows = run([[[1, 2], 3, 1]] * 500)
    assert same_rows[0] == OK and (same_rows[1][1] == 2).all() and len(same_rows[4]) == 500
    assert run([[1, 2], 3, 1])[0] == FALLBACK  # a single update: the general path
    assert run({"progress": 5})[0] == FALLBACK
    assert run([[[1, 2], 3, 0]])[0] == FALLBACK  # zero diff: the general path names it
    assert run([[[1, 2], None, 1]])[0] == FALLBACK  # nil time
    assert run([[[1, 2**64 - 1], 3, 1]])[0] == FALLBACK  # outside int64
    assert run([[[1, "a"], 3, 1]])[0] == FALLBACK
    strs = np.array([STR, BYTES, ANY], dtype=np.int64)
    ok = run([[["é", b"\x00", [1, {"a": None}]], 3, 1]], strs)
    assert ok[0] == OK and msgpack.unpackb(ok[5][ok[6][0]:ok[6][1]].tobytes()) == ["é"]
    assert run([[[b"x", b"y", 1], 3, 1]], strs)[0] == FALLBACK  # bytes in a str field
    assert run([[["x", "y", 1], 3, 1]], strs)[0] == FALLBACK  # a str in a bytes field
    deep = [0]
    for _ in range(MAX_NESTING):
        deep = [deep]
    assert run([[["x", b"y", deep], 3, 1]], strs)[0] == FALLBACK  # nested too deep: the general path
    assert run([[["x", b"y", deep[0]], 3, 1]], strs)[0] == OK
    not_utf8 = b"\x91\x93\x93\xa1\xff\xc4\x00\x01\x03\x01"
    assert unpack_batch(np.frombuffer(not_utf8, dtype=np.uint8), strs)[0] == OK  # msgpack checks the UTF-8
    assert unpack_columns(not_utf8, strs)[0] == FALLBACK
    assert run([[[1, True], 3, 1]])[0] == FALLBACK  # a bool is not an int
    assert run([[[1, 2, 3], 3, 1]])[0] == FALLBACK  # arity
    assert unpack_batch(np.frombuffer(b"", dtype=np.uint8), ints)[0] == FALLBACK
    assert unpack_batch(np.frombuffer(b"\xdd\xff\xff\xff\xff", dtype=np.uint8), ints)[0] == FALLBACK  # a lying count
