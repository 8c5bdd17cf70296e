"""Wire formats: every malformed class gets its precise reason; good parts of a batch survive."""

from __future__ import annotations

import msgpack
import pytest

from ddflow.daemon.exceptions import OptionsError, WireError
from ddflow.operators.lattice import T_MAX, T_MIN
from ddflow.daemon.formats.types import REASONS
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.result_protocol import (
    OutputBatch,
    OutputProgress,
    decode_output,
    encode_output_batch,
    encode_output_progress,
    pack_output_update,
    pack_record,
)
from ddflow.daemon.formats.msgpack import decode_input, encode_progress, encode_update, encode_updates

FMT = InputFormat(fields={"src": "int", "dst": "int"})


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def test_single_update_batch_and_progress_decode():
    assert decode_input(encode_update([1, 2], 5, 1), FMT).updates == [((1, 2), 5, 1)]
    batch = decode_input(encode_updates([([1, 2], 5, 1), ([3, 4], 6, -2)]), FMT)
    assert batch.updates == [((1, 2), 5, 1), ((3, 4), 6, -2)] and not batch.malformed
    marker = decode_input(encode_progress(7), FMT)
    assert marker.progress == 7 and marker.updates == [] and not marker.malformed
    # a batch of exactly three updates is not mistaken for one update
    three = decode_input(encode_updates([([i, i], i, 1) for i in range(3)]), FMT)
    assert [u[0] for u in three.updates] == [(0, 0), (1, 1), (2, 2)]


MALFORMED = [
    ("empty", b""),
    ("bad_msgpack", b"\xc1"),
    ("bad_msgpack", pack([[1, 2], 5, 1]) + b"\x01"),
    ("bad_msgpack", b"\xa3\xff\xfe\xfd"),  # invalid utf-8 string
    ("shape", pack(5)),
    ("shape", pack("hello")),
    ("shape", pack({"progres": 5})),
    ("bad_progress", pack({"progress": 1.5})),
    ("bad_progress", pack({"progress": 2**63})),
    ("arity", pack([[1, 2], 5])),
    ("arity", pack([[[1, 2], 5, 1, 9]])),
    ("arity", pack([[1, 2, 3], 5, 1])),
    ("field_type", pack([[1, "x"], 5, 1])),
    ("field_type", pack([7, 5, 1])),
    ("time_type", pack([[1, 2], 5.0, 1])),
    ("time_type", pack([[1, 2], None, 1])),
    ("time_range", pack([[1, 2], 2**63, 1])),
    ("diff_type", pack([[1, 2], 5, 1.0])),
    ("diff_type", pack([[1, 2], 5, True])),
    ("zero_diff", pack([[1, 2], 5, 0])),
    ("diff_range", pack([[1, 2], 5, 2**64 - 1])),
]


@pytest.mark.parametrize("reason,value", MALFORMED)
def test_each_malformed_class_has_its_reason(reason, value):
    decoded = decode_input(value, FMT)
    assert decoded.updates == [] and decoded.progress is None
    assert {m.reason for m in decoded.malformed} == {reason}  # [[1, 2], 5] is a batch of two bad updates
    assert reason in REASONS and decoded.malformed[0].detail


def test_oversized_and_unhashable():
    fmt = InputFormat(max_message_bytes=64)
    big = encode_update(["x" * 100], 1, 1)
    assert decode_input(big, fmt).malformed[0].reason == "oversized"
    assert decode_input(pack([[{"a": 1}], 1, 1]), InputFormat()).malformed[0].reason == "field_type"


def test_bad_updates_in_a_batch_keep_the_good_ones_with_indices():
    value = pack([[[1, 2], 5, 1], [[1, 2], 5, 0], [[3, 4], 6, 1], [[1], 6, 1], "junk"])
    decoded = decode_input(value, FMT)
    assert decoded.updates == [((1, 2), 5, 1), ((3, 4), 6, 1)]
    assert [(m.reason, m.index) for m in decoded.malformed] == [("zero_diff", 1), ("arity", 3), ("arity", 4)]


def test_field_types_any_and_float_conversion():
    fmt = InputFormat(fields={"k": "str", "v": "float", "b": "bytes", "f": "bool", "a": "any"})
    decoded = decode_input(pack([["k", 3, b"\x00", True, [1, [2]]], 1, 1]), fmt)
    assert decoded.updates == [(("k", 3.0, b"\x00", True, (1, (2,))), 1, 1)]
    assert decode_input(pack([[1, 2], T_MAX, 1]), InputFormat()).updates[0][1] == T_MAX
    assert decode_input(pack([[1, 2], T_MIN, 1]), InputFormat()).updates[0][1] == T_MIN


def test_reclocked_inputs_may_omit_the_time():
    fmt = InputFormat(time_required=False)
    assert decode_input(pack([[1], None, 1]), fmt).updates == [((1,), None, 1)]


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"fields": "src"}, "fields"),
        ({"fields": []}, "fields"),
        ({"fields": {"a": "integer"}}, "type 'integer'"),
        ({"fields": ["a", "a"]}, "duplicate"),
        ({"max_message_bytes": 0}, "max_message_bytes"),
    ],
)
def test_bad_formats_name_the_option(kwargs, key):
    with pytest.raises(OptionsError, match=key):
        InputFormat(**kwargs)


def test_output_roundtrip():
    entries = [pack_output_update(pack_record(("a", (1, 2)), "out"), 10, 1), pack_output_update(pack_record(3, "out"), 11, -1)]
    batch = decode_output(encode_output_batch(0, 20, "inc1", entries))
    assert batch == OutputBatch(0, 20, "inc1", [(("a", (1, 2)), 10, 1), (3, 11, -1)])
    assert decode_output(encode_output_progress(0, None, "inc1", 2)) == OutputProgress(0, None, "inc1", 2)


def test_encoding_errors_name_the_value():
    with pytest.raises(WireError, match="output 'out'"):
        pack_record(object(), "out")
    with pytest.raises(WireError, match="progress"):
        encode_progress(2**63)
    with pytest.raises(WireError, match="not msgpack"):
        decode_output(b"\xc1")
    with pytest.raises(WireError, match="malformed"):
        decode_output(pack({"lower": 0}))


# -- the column-wise fast path agrees with the update-by-update check ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_scalars = st.one_of(st.integers(-(2**64), 2**64), st.floats(allow_nan=False), st.text(max_size=3),
                     st.binary(max_size=3), st.booleans(), st.none())
_values = st.one_of(_scalars, st.lists(_scalars, max_size=3).map(tuple), st.dictionaries(st.text(max_size=2), _scalars, max_size=1))
_good = st.tuples(st.tuples(st.integers(-5, 5), st.integers(-5, 5)), st.integers(-(2**63), 2**63 - 1),
                  st.integers(-(2**63), 2**63 - 1).filter(bool))
_item = st.one_of(_good, _good, _good, st.tuples(_values, _values, _values), st.lists(_values, max_size=4).map(tuple), _values)
_formats = [InputFormat(), InputFormat(fields=["a", "b"]), InputFormat(fields={"a": "int", "b": "float"}),
            InputFormat(fields={"a": "any", "b": "int"}), InputFormat(fields=["a", "b"], time_required=False)]


@settings(max_examples=400, deadline=None)
@given(st.lists(_item, min_size=1, max_size=6), st.sampled_from(range(len(_formats))))
def test_fast_batch_check_agrees_with_the_slow_one(items, which):
    validator = _formats[which]._validator
    items = tuple(items)
    slow = [validator.check(item, i) for i, item in enumerate(items)]
    columns = validator.check_batch(items)
    if any(type(x).__name__ == "Malformed" for x in slow):
        assert columns is None
    else:
        fast = list(zip(*columns))
        assert fast == slow
        assert [tuple(map(type, d)) for d, _, _ in fast] == [tuple(map(type, d)) for d, _, _ in slow]
