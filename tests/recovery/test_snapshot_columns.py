"""A snapshot loads as columns: Parquet columns -> engine columns, no row in between.

`Snapshot.read_blocks` (what the daemon's loader reads) gives each input's base and pending updates
as blocks whose records are `RecordColumns` (an input without declared fields: a list of its whole
records), whatever the fields' types; no function that builds rows or record tuples runs while a
snapshot is read, shared among workers and fed to an input session. The collection fed is the one
written, and the workers' shares partition it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ddflow.daemon.block import Block
from ddflow.daemon.state.snapshot import Snapshot, SnapshotWriter, columns_for_fields
from ddflow.operators import Dataflow
from ddflow.operators.input import RecordColumns

INPUTS = {
    "str,int": {"w": "str", "n": "int"},
    "str": {"w": "str"},
    "every type": {"k": "str", "x": "float", "blob": "bytes", "flag": "bool", "n": "int", "anything": "any"},
    "untyped": None,
}


def record(rng: random.Random, fields) -> tuple:
    anything = [1, 2.5, "s", b"b", None, True, (1, (2, "x")), -(2**62)]
    make = {"str": lambda: f"k{rng.randrange(40)}", "int": lambda: rng.randrange(-3, 3),
            "float": lambda: rng.choice([0.5, -1.0, 3.25]), "bytes": lambda: bytes([rng.randrange(3)]),
            "bool": lambda: rng.random() < 0.5, "any": lambda: rng.choice(anything)}
    if fields is None:
        return (rng.randrange(30), ("nested", rng.randrange(3)), None)[: rng.randrange(1, 4)]
    return tuple(make[kind]() for kind in fields.values())


def no_rows(*args, **kwargs):
    raise AssertionError("a row or a record tuple was built while loading")


@pytest.mark.parametrize("case", sorted(INPUTS))
def test_a_snapshot_loads_as_columns(case, tmp_path, monkeypatch):
    fields = INPUTS[case]
    rng = random.Random(7)
    base = {record(rng, fields): rng.choice([1, -2, 3]) for _ in range(300)}
    pending = [(r, 100 + rng.randrange(20), rng.choice([1, -1])) for r in list(base)[:50]]
    writer = SnapshotWriter(tmp_path / "s", 100, shards=4, origin="checkpoint")
    writer.add_input("in", "t", columns_for_fields(fields), base, pending)
    snapshot = Snapshot.open(writer.commit())
    want: Counter = Counter(base)
    for r, _t, d in pending:
        want[r] += d

    for name in ("rows", "record_list", "from_rows"):
        monkeypatch.setattr(Block, name, no_rows)
    monkeypatch.setattr(RecordColumns, "tuples", no_rows)
    whole = snapshot.read_blocks("in")
    shares = [snapshot.read_blocks("in", owner=(i, 3)) for i in range(3)]
    for block in whole:
        assert type(block.records) is (list if fields is None else RecordColumns)
    assert (whole[0].times == 99).all()
    df = Dataflow()
    session = df.new_input("in")
    fed = df.new_input("shares")
    capture, shared = session.collection.capture(), fed.collection.capture()
    for block in whole:
        session.update_many(block.records, block.times, block.diffs)
    for share in shares:
        for block in share:
            fed.update_many(block.records, block.times, block.diffs)
    session.advance_to(200)
    fed.advance_to(200)
    df.run()
    monkeypatch.undo()

    expected = {r: c for r, c in want.items() if c}
    assert capture.at(199) == expected and shared.at(199) == expected
    assert sum(len(b) for share in shares for b in share) == sum(len(b) for b in whole)
    assert snapshot.read_input("in")[0] == list(zip(whole[0].record_list(), whole[0].diffs.tolist()))
