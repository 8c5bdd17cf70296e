"""Benchmark: decoding msgpack input batches and feeding them to the engine, rows against columns.

N updates of an input with a string field (``--fields "word:str,n:int"`` by default: records
``(word, n)``; ``"word:str"`` for one-field records) in batch messages of ``--batch`` updates,
``--distinct`` distinct words. Two ways through the same code, in the same process, alternated
``--repeat`` times (the best of each is printed):

* rows (the baseline, how such messages travelled before): ``msgpack.unpackb`` into objects, the
  batch checked column-wise, zipped into ``(data, time, diff)`` rows, a block built back from the
  rows, the blocks joined and fed to ``InputSession.update_many`` as a list of record tuples;
* columns (the daemon's decoder now): the compiled kernel reads each message into columns and
  msgpack decodes each string field as one array (`decode_input`), the blocks are joined column
  by column and fed as `RecordColumns`.

With ``--json`` the messages are JSON arrays instead: rows (the update-by-update check, which
JSON batches took before and still take when an update is bad) against columns (`JsonDecoder`).

With ``--snapshot`` the same records are instead written as a snapshot's base (4 shards) and
loaded: rows (how a snapshot loaded before: each Parquet column to Python values, zipped into
record tuples and ``(record, diff)`` rows, unzipped and fed as tuples) against columns
(`Snapshot.read_blocks`, what the daemon's loader reads, fed as `RecordColumns`).

Each run ends when ``Dataflow.run()`` has interned the records (the input node's step); the
records' ids are checked to be the same both ways. CPU time (``time.process_time``).

    .venv/bin/python benchmarks/bench_intake.py [--updates 1000000] [--fields word:str] [--json | --snapshot]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np

from ddflow.daemon.block import Block
from ddflow.daemon.formats import json as json_format
from ddflow.daemon.formats.msgpack import decode_input
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.state.snapshot import Snapshot, SnapshotWriter, columns_for_fields
from ddflow.operators import Dataflow


def messages(n: int, batch: int, fields: dict[str, str], distinct: int, *, as_json: bool = False) -> list[bytes]:
    rng = np.random.default_rng(1)
    words = [f"word-{i:06d}" for i in range(distinct)]
    picks = rng.integers(0, distinct, n).tolist()
    out = []
    for start in range(0, n, batch):
        updates = []
        for i in range(start, min(n, start + batch)):
            data = [words[picks[i]] if kind == "str" else i % 1000 for kind in fields.values()]
            updates.append([data, 1_000 + i, 1])
        out.append(json.dumps(updates).encode() if as_json else msgpack.packb(updates))
    return out


def by_rows(values: list[bytes], fmt: InputFormat) -> Block:
    validator = fmt._validator
    blocks = []
    for value in values:
        obj = msgpack.unpackb(value, raw=False, use_list=False, strict_map_key=False)
        rows = list(zip(*validator.check_batch(obj)))
        blocks.append(Block.from_rows(rows))
    return Block.concat(blocks)


def by_columns(values: list[bytes], fmt: InputFormat) -> Block:
    return Block.concat([decode_input(value, fmt).block for value in values])


def json_rows(values: list[bytes], fmt: InputFormat) -> Block:
    decoder, batch_block = json_format.JsonDecoder(fmt), json_format._batch_block
    json_format._batch_block = lambda items, fields: None
    try:
        return Block.concat([decoder.decode(value).block for value in values])
    finally:
        json_format._batch_block = batch_block


def json_columns(values: list[bytes], fmt: InputFormat) -> Block:
    decoder = json_format.JsonDecoder(fmt)
    return Block.concat([decoder.decode(value).block for value in values])


def snapshot_of(values: list[bytes], fmt: InputFormat, fields: dict[str, str], where: Path) -> Snapshot:
    base = Block.concat([decode_input(value, fmt).block for value in values])
    writer = SnapshotWriter(where / "s", 1 << 40, shards=4, origin="checkpoint")
    writer.add_input("in", "t", columns_for_fields(fields), list(zip(base.record_list(), base.diffs.tolist())))
    return Snapshot.open(writer.commit())


def load_rows(snapshot: Snapshot, fmt: InputFormat) -> Block:
    entry = snapshot.inputs["in"]
    base = []
    for f in entry.base:
        table = snapshot._read_file(entry, f, False)
        values = [table.column(f"f{i}").to_pylist() for i in range(len(entry.columns))]
        base.extend(zip(zip(*values), table.column("diff").to_pylist()))
    records, diffs = zip(*base)
    return Block(list(records), np.full(len(records), snapshot.frontier - 1, dtype=np.int64),
                 np.array(diffs, dtype=np.int64))


def load_columns(snapshot: Snapshot, fmt: InputFormat) -> Block:
    return snapshot.read_blocks("in")[0]


def run(way, values, fmt: InputFormat) -> tuple[float, float, np.ndarray]:
    """``(decode seconds, decode + ingest seconds, the records' ids)`` (CPU); ``values``: the
    messages, or the snapshot."""
    started = time.process_time()
    block = way(values, fmt)
    decoded = time.process_time()
    df = Dataflow()
    session = df.new_input("in")
    node = session._node
    captured: list[np.ndarray] = []
    emit = node.emit
    node.emit = lambda updates: (captured.append(updates.data[0]), emit(updates))[1]
    session.update_many(block.records, block.times, block.diffs)
    session.advance_to(1 << 40)
    df.run()
    done = time.process_time()
    return decoded - started, done - started, np.concatenate(captured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--distinct", type=int, default=10_000)
    parser.add_argument("--fields", default="word:str,n:int")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--snapshot", action="store_true", help="load the records from a snapshot instead")
    parser.add_argument("--json", action="store_true", help="JSON messages instead of msgpack")
    args = parser.parse_args()
    fields = dict(f.split(":") for f in args.fields.split(","))
    fmt = InputFormat(fields=fields)
    values = messages(args.updates, args.batch, fields, args.distinct)
    run(by_columns, values[:2], fmt)  # kernels loaded
    ways = (("rows", by_rows), ("columns", by_columns))
    if args.json:
        values = messages(args.updates, args.batch, fields, args.distinct, as_json=True)
        ways = (("rows", json_rows), ("columns", json_columns))
    if args.snapshot:
        scratch = tempfile.TemporaryDirectory()
        values = snapshot_of(values, fmt, fields, Path(scratch.name))
        ways = (("rows", load_rows), ("columns", load_columns))
    best: dict[str, tuple[float, float]] = {}
    ids: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        for name, way in ways:
            decode, total, got = run(way, values, fmt)
            ids[name] = got
            best[name] = min(best.get(name, (decode, total)), (decode, total), key=lambda x: x[1])
    if ids["rows"].tolist() != ids["columns"].tolist():
        raise SystemExit("the records' ids differ between rows and columns")
    n = len(ids["columns"])
    source = f"a snapshot's base of {n:,} records (4 shards)" if args.snapshot else \
        f"{args.batch:,} per {'JSON' if args.json else 'msgpack'} message"
    print(f"{args.updates:,} updates, fields {fields}, {args.distinct:,} distinct words, {source}")
    for name in ("rows", "columns"):
        decode, total = best[name]
        step = "read" if args.snapshot else "decode"
        print(f"  {name:8s} {step} {decode:.3f} s CPU, {step} + ingest {total:.3f} s CPU "
              f"({n / total:,.0f} updates/s)")
    rows, columns = best["rows"][1], best["columns"][1]
    print(f"  columns / rows: {columns / rows:.2f}x the CPU time ({rows / columns:.2f}x faster); "
          f"{'read' if args.snapshot else 'decode'} alone {best['columns'][0] / best['rows'][0]:.2f}x")


if __name__ == "__main__":
    main()
