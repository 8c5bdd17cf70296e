"""No input is poison: every format refuses a value no output can carry (an integer outside int64,
a float that is not finite, however spelled) with the reason ``field_range``, at and past every
bound and nested anywhere in a record; what it accepts, every output encoding can write."""

from __future__ import annotations

import json
import math
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.daemon.formats import decoder
from ddflow.daemon.formats.schema import InputFormat

T = 1_700_000_000_000_000_000
LO, HI = -(1 << 63), (1 << 63) - 1
BOUNDS = [LO - 1, LO, LO + 1, -1, 0, 1, HI - 1, HI, HI + 1, (1 << 64) - 1, 1 << 64, 1 << 70, -(1 << 70)]
INTS = st.one_of(st.sampled_from(BOUNDS), st.integers(LO, HI), st.integers(-(1 << 80), 1 << 80))
FLOATS = st.one_of(st.sampled_from([math.inf, -math.inf, math.nan, 1.7976931348623157e308, -0.0, 5e-324]),
                   st.floats(allow_nan=True, allow_infinity=True))
TYPED = InputFormat({"i": "int", "f": "float"})
ANY = InputFormat(["a", "b"])


def carried(value: Any) -> bool:
    """The oracle: whether every int in ``value`` is within int64 and every float finite."""
    if type(value) is int:
        return LO <= value <= HI
    if type(value) is float:
        return math.isfinite(value)
    if type(value) in (list, tuple):
        return all(map(carried, value))
    return True


def publishable(record: tuple) -> None:
    """Every output encoding can write the record (raises otherwise)."""
    msgpack.packb(record, use_bin_type=True)
    json.dumps(record, allow_nan=False)


def spell(value: Any, big: bool) -> str:
    """JSON text of ``value``; non-finite floats spelled ``Infinity``/``NaN`` or, with ``big``, as
    numbers past a double's range (``1e400``)."""
    if type(value) is float and not math.isfinite(value):
        if big and not math.isnan(value):
            return "1e400" if value > 0 else "-1e400"
        return {True: "NaN"}.get(math.isnan(value), "Infinity" if value > 0 else "-Infinity")
    if type(value) in (list, tuple):
        return "[" + ", ".join(spell(v, big) for v in value) + "]"
    return json.dumps(value)


def check(decoded, data: tuple, expect: tuple) -> None:
    if carried(data):
        assert decoded.malformed is None, decoded.malformed
        assert [u[0] for u in decoded.updates] == [expect]
        publishable(decoded.updates[0][0])
    else:
        assert decoded.updates == [] and [m.reason for m in decoded.malformed] == ["field_range"], decoded.malformed


def typed(i: int, f: float | int) -> tuple:
    return (i, float(f) if type(f) is int else f)


@settings(max_examples=300, deadline=None)
@given(i=INTS, f=st.one_of(FLOATS, INTS), batch=st.booleans())
def test_msgpack_typed_fields(i, f, batch):
    if not (-(1 << 63) <= i < 1 << 64 and (type(f) is float or -(1 << 63) <= f < 1 << 64)):
        return  # msgpack cannot spell it
    update = [[i, f], T, 1]
    decoded = decoder("msgpack", TYPED).decode(msgpack.packb([update, update] if batch else update))
    if batch and carried((i, f)):
        assert len(decoded.updates) == 2
        decoded.updates[1:] = []
    elif batch:
        assert [m.reason for m in decoded.malformed] == ["field_range"] * 2
        decoded.malformed[1:] = []
    check(decoded, (i, f), typed(i, f))


@settings(max_examples=300, deadline=None)
@given(a=st.one_of(INTS, FLOATS), b=st.lists(st.one_of(INTS, FLOATS), max_size=3), batch=st.booleans())
def test_msgpack_any_fields_nested(a, b, batch):
    if not carried([v for v in [a, *b] if type(v) is int and -(1 << 63) <= v < 1 << 64] or [0]) or any(
            type(v) is int and not -(1 << 63) <= v < 1 << 64 for v in [a, *b]):
        return  # msgpack cannot spell it
    update = [[a, b], T, 1]
    decoded = decoder("msgpack", ANY).decode(msgpack.packb([update] if batch else update))
    check(decoded, (a, tuple(b)), (a, tuple(b)))


@settings(max_examples=300, deadline=None)
@given(i=INTS, f=st.one_of(FLOATS, INTS), b=st.lists(st.one_of(INTS, FLOATS), max_size=3), big=st.booleans(),
       form=st.sampled_from(["array", "object", "batch"]))
def test_json_every_spelling(i, f, b, big, form):
    fields = '{"i": %s, "f": %s, "time": %d, "diff": 1}' % (spell(i, big), spell(f, big), T)
    text = {"array": f"[[{spell(i, big)}, {spell(f, big)}], {T}, 1]", "object": fields, "batch": f"[{fields}]"}[form]
    check(decoder("json", TYPED).decode(text.encode()), (i, f), typed(i, f) if carried((i, f)) else None)
    text = f"[[{spell(i, big)}, {spell(b, big)}], {T}, 1]"
    check(decoder("json", ANY).decode(text.encode()), (i, b), (i, tuple(b)))


@settings(max_examples=200, deadline=None)
@given(i=INTS, f=st.one_of(FLOATS, INTS), big=st.booleans(), op=st.sampled_from(["c", "d"]))
def test_debezium_rows(i, f, big, op):
    row = '{"i": %s, "f": %s}' % (spell(i, big), spell(f, big))
    event = '{"op": "%s", "%s": %s, "ts_ms": 1700000000000}' % (op, "after" if op == "c" else "before", row)
    check(decoder("debezium", TYPED).decode(event.encode()), (i, f), typed(i, f) if carried((i, f)) else None)


def test_the_probe_cases():
    """The values a hostile probe found accepted and then unpublishable, and duplicate keys."""
    json_in = decoder("json", InputFormat({"n": "int"}))
    for text in (b'[[1180591620717411303424], 1, 1]', b'{"n": 1180591620717411303424, "time": 1, "diff": 1}'):
        assert [m.reason for m in json_in.decode(text).malformed] == ["field_range"]
    assert "outside int64" in json_in.decode(b'[[1180591620717411303424], 1, 1]').malformed[0].detail
    floats = decoder("json", InputFormat({"x": "float"}))
    for spelled in (b"1e400", b"Infinity", b"-Infinity", b"NaN", b"-1e999"):
        assert [m.reason for m in floats.decode(b"[[%s], 1, 1]" % spelled).malformed] == ["field_range"], spelled
    assert [m.reason for m in floats.decode(b'{"x": 1.0, "x": 2.0, "time": 1, "diff": 1}').malformed] == ["bad_json"]
    uint = decoder("msgpack", InputFormat({"n": "int"}))
    for value in (msgpack.packb([[(1 << 64) - 1], 1, 1]), msgpack.packb([[[(1 << 64) - 1], 1, 1]] * 3)):
        assert {m.reason for m in uint.decode(value).malformed} == {"field_range"}
    debezium = decoder("debezium", InputFormat({"n": "int"}))
    assert [m.reason for m in debezium.decode(b'{"op": "c", "after": {"n": 1180591620717411303424}, '
                                              b'"ts_ms": 1}').malformed] == ["field_range"]
