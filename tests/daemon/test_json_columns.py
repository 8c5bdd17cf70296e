"""JSON batches decoded column by column decode as the update-by-update path does.

A JSON batch whose updates are all valid is taken apart field by field and checked column-wise
(`json._batch_block`: no row per update); otherwise each update is checked on its own. On random
batches (arrays and objects, good and bad values of every kind, typed and untyped inputs) the
decoder must give what the update-by-update path gives: the same updates, values of the same types,
the same bad updates and positions. A valid batch must go the column way, with no row built.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.daemon.block import Block
from ddflow.daemon.formats import json as json_format
from ddflow.daemon.formats.json import JsonDecoder
from ddflow.daemon.formats.schema import InputFormat
from ddflow.operators.input import RecordColumns

FORMATS = [InputFormat(fields={"w": "str", "n": "int"}), InputFormat(fields={"x": "float", "b": "bool", "a": "any"}),
           InputFormat(fields={"w": "str"}), InputFormat(), InputFormat(fields=["p", "q"])]
SCALARS = st.one_of(st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3),
                    st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=1), inner,
                                                                                            max_size=1), max_leaves=4)
GOOD = {"str": st.text(max_size=3), "int": st.integers(-5, 5), "float": st.one_of(st.floats(-2, 2), st.integers(-2, 2)),
        "bool": st.booleans(), "any": st.one_of(st.integers(-3, 3), st.text(max_size=2),
                                                st.lists(st.integers(0, 2), max_size=2))}


@st.composite
def batches(draw):
    which = draw(st.integers(0, len(FORMATS) - 1))
    fmt = FORMATS[which]
    types = fmt.field_types or ("any",) * draw(st.integers(1, 3))
    names = fmt.field_names
    as_objects = names is not None and draw(st.booleans())
    items = []
    for _ in range(draw(st.integers(1, 6))):
        bad = draw(st.integers(0, 9)) == 0
        data = [draw(VALUES if bad and draw(st.booleans()) else GOOD[kind]) for kind in types]
        time = draw(st.one_of(st.integers(0, 9), st.integers(0, 9), st.just("t"), st.integers(2**63, 2**64)) if bad
                    else st.integers(0, 9))
        diff = draw(st.one_of(st.sampled_from([1, -1, 0]), st.floats(-1, 1)) if bad else st.sampled_from([1, -1, 2]))
        if as_objects:
            item = {**dict(zip(names, data)), "time": time, "diff": diff}
            if bad and draw(st.booleans()):
                item.pop(draw(st.sampled_from(sorted(item))))
        else:
            item = [data, time, diff]
        items.append(item)
    return which, json.dumps(items).encode()


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b or (type(a) is float and math.isnan(a) and math.isnan(b))


@settings(max_examples=300, deadline=None)
@given(batches())
def test_columns_decode_as_the_update_by_update_path(batch):
    which, value = batch
    decoder = JsonDecoder(FORMATS[which])
    got = decoder.decode(value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_format, "_batch_block", lambda items, fields: None)
        want = decoder.decode(value)
    assert same(got.updates, want.updates)
    assert got.malformed == want.malformed and got.indexes == want.indexes


def no_rows(*args, **kwargs):
    raise AssertionError("a row was built")


@pytest.mark.parametrize("objects", [False, True])
def test_a_valid_batch_is_decoded_into_columns(objects, monkeypatch):
    fmt = InputFormat(fields={"w": "str", "x": "float", "a": "any"})
    items = [[[f"w{i}", i, [i, "z"]], i, 1] for i in range(50)]
    if objects:
        items = [{"w": d[0], "x": d[1], "a": d[2], "time": t, "diff": r, "other": 0} for d, t, r in items]
    monkeypatch.setattr(Block, "from_rows", no_rows)
    monkeypatch.setattr(Block, "rows", no_rows)
    decoded = JsonDecoder(fmt).decode(json.dumps(items).encode())
    block = decoded.block
    assert type(block.records) is RecordColumns and len(block) == 50
    assert block.records.columns[1][:2] == [0.0, 1.0] and block.records.columns[2][3] == (3, "z")
    assert block.times.tolist() == list(range(50))
