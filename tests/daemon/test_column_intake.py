"""Decoded columns reach the engine without a Python object per update, whatever the fields' types.

A batch of an input with str, bytes, float, bool or untyped fields is decoded into `RecordColumns`
(the kernel's columns and one msgpack call per field), joined with other messages' blocks and fed
to an input session as columns: no function that builds rows or record tuples may run on the way
(they are replaced by ones that fail), and a record of two fields is interned from its two columns
(the interner never sees a tuple). The collection is the one the updates describe.
"""

from __future__ import annotations

from collections import Counter

import msgpack
import pytest

from ddflow.daemon.block import Block
from ddflow.daemon.formats.msgpack import decode_input
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.types import Decoded
from ddflow.operators import Dataflow
from ddflow.operators.input import RecordColumns
from ddflow.operators.values.interner import Interner

FIELDS = {
    "str,int": ({"word": "str", "n": "int"}, lambda i: (f"w{i % 7}", i % 3)),
    "str": ({"word": "str"}, lambda i: (f"w{i % 5}",)),
    "any,bytes,float,bool": ({"a": "any", "b": "bytes", "c": "float", "d": "bool"},
                             lambda i: ([i % 2, "x"] if i % 3 else f"s{i % 4}", bytes([i % 3]), i / 2, i % 2 == 0)),
}


def no_rows(*args, **kwargs):
    raise AssertionError("a row or a record tuple was built on the way in")


@pytest.mark.parametrize("case", sorted(FIELDS))
def test_batches_enter_the_engine_as_columns(case, monkeypatch):
    fields, record = FIELDS[case]
    fmt = InputFormat(fields=fields)
    messages = [[[list(record(i)), 10 + i % 4, 1 if i % 5 else -1] for i in range(start, start + 40)]
                for start in (0, 40, 80)]
    want: Counter = Counter()
    for message in messages:
        for data, _time, diff in message:
            want[tuple(tuple(v) if type(v) is list else v for v in data)] += diff
    for name in ("rows", "record_list", "from_rows"):
        monkeypatch.setattr(Block, name, no_rows)
    monkeypatch.setattr(RecordColumns, "tuples", no_rows)
    monkeypatch.setattr(Decoded, "updates", property(no_rows))
    seen: list[type] = []
    ids = Interner.ids

    def spy(self, values, known=None):
        seen.extend(set(map(type, values)))
        return ids(self, values, known)

    monkeypatch.setattr(Interner, "ids", spy)

    blocks = [decode_input(msgpack.packb(m), fmt).block for m in messages]
    assert all(type(b.records) is RecordColumns for b in blocks)
    block = Block.concat(blocks)
    assert type(block.records) is RecordColumns and len(block) == 120
    df = Dataflow()
    session = df.new_input("in")
    capture = session.collection.capture()
    session.update_many(block.records, block.times, block.diffs)
    session.advance_to(20)
    df.run()
    if len(fields) == 2:
        assert tuple not in seen  # a pair is interned from its columns
    monkeypatch.undo()
    assert capture.at(19) == {r: c for r, c in want.items() if c}
