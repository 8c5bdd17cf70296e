"""Shard files: records as columns, the key hash that places them, and the Parquet file writer.

A snapshot's updates are stored per input in Parquet files, one per shard and part (see
`snapshot`). A record's columns follow the input's declared field types: ``int``, ``float``,
``str``, ``bytes`` and ``bool`` natively (int64, float64, string, binary, bool); ``any`` fields,
and the whole record of an input without declared fields, as msgpack bytes. A base file holds
columns ``f0..fN`` and ``diff``; a pending file also ``time``.

A record's shard is ``key_hash(key) % shards`` where the key is its first field (`shard_of`):
the engine's one stable key hash (`ddflow.operators.partition`), which also decides the worker
that owns the key, so a worker's keys are in the shards ``s`` with ``s % workers`` its own when
``workers`` divides ``shards``. The same function runs in the daemon and in the Spark backfill's
executors, which also write their files with the same `ShardFileWriter` (zstd Parquet, hashed with
sha256 while it is written, fsynced on close), so a shard file is alike whoever writes it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...operators.input import RecordColumns
from ...operators.partition import key_hashes, partition_of, record_key
from ..block import Block
from ..exceptions import SnapshotError

__all__ = [
    "ARROW_TYPES",
    "WHOLE_RECORD",
    "Column",
    "FileEntry",
    "ShardFileWriter",
    "arrow_schema",
    "columns_for_fields",
    "decode_block",
    "decode_records",
    "encode_table",
    "joined",
    "owned",
    "record_key",
    "shard_ids",
    "shard_of",
    "write_table_file",
]

WHOLE_RECORD = "record"  # the one column of an input without declared fields

# column type -> (arrow type, field types it holds)
ARROW_TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "bool": pa.bool_(),
    "msgpack": pa.binary(),
}
FIELD_COLUMN_TYPES = {
    "int": "int64", "float": "float64", "str": "string", "bytes": "binary", "bool": "bool", "any": "msgpack",
}

_pack = msgpack.Packer(use_bin_type=True).pack


@dataclass(frozen=True)
class Column:
    """One field of an input's records: its name and how it is stored (a key of ``ARROW_TYPES``)."""

    name: str
    type: str

    def __post_init__(self) -> None:
        if self.type not in ARROW_TYPES:
            raise SnapshotError(f"column {self.name!r}: type {self.type!r} is not one of {', '.join(ARROW_TYPES)}")


def columns_for_fields(fields: Sequence[str] | Mapping[str, str] | None) -> tuple[Column, ...]:
    """The snapshot columns of an input with these declared fields (see `source.InputSpec`)."""
    if fields is None:
        return (Column(WHOLE_RECORD, "msgpack"),)
    types = dict(fields) if isinstance(fields, Mapping) else dict.fromkeys(fields, "any")
    return tuple(Column(name, FIELD_COLUMN_TYPES[kind]) for name, kind in types.items())


def _whole(columns: Sequence[Column]) -> bool:
    return len(columns) == 1 and columns[0].name == WHOLE_RECORD and columns[0].type == "msgpack"


def shard_of(record: Any, shards: int) -> int:
    """The shard of a record: the stable key hash of its key (first field), modulo ``shards``."""
    return partition_of(record, shards)


def shard_ids(keys: Iterable[Any], shards: int) -> np.ndarray:
    """`shard_of` for many keys (already extracted with `record_key`), as an int64 array."""
    return key_hashes(keys) % shards


# -- tables and files ----------------------------------------------------------------------------------------


def arrow_schema(columns: Sequence[Column], *, pending: bool) -> pa.Schema:
    """The Parquet schema of a base (f0.., diff) or pending (f0.., time, diff) file."""
    names = [pa.field(f"f{i}", ARROW_TYPES[c.type]) for i, c in enumerate(columns)]
    if pending:
        names.append(pa.field("time", pa.int64()))
    names.append(pa.field("diff", pa.int64()))
    return pa.schema(names)


def encode_table(
    records: Sequence[Any], diffs: Sequence[int], columns: Sequence[Column], times: Sequence[int] | None = None
) -> pa.Table:
    """A base (``times`` None) or pending table from records and their diffs."""
    schema = arrow_schema(columns, pending=times is not None)
    if _whole(columns):
        values: list[Sequence[Any]] = [records]
    elif records:
        try:
            values = list(zip(*records, strict=True))
        except (TypeError, ValueError) as exc:
            raise SnapshotError(f"encoding records as {len(columns)} columns ({', '.join(c.name for c in columns)}): "
                                f"a record does not have that many fields ({exc})") from exc
        if len(values) != len(columns):
            raise SnapshotError(f"encoding records as {len(columns)} columns: they have {len(values)} fields, "
                                f"e.g. {records[0]!r:.120}")
    else:
        values = [() for _ in columns]
    arrays = []
    for column, column_values in zip(columns, values, strict=True):
        if column.type == "msgpack":
            column_values = list(map(_pack, column_values))
        try:
            arrays.append(pa.array(column_values, ARROW_TYPES[column.type]))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SnapshotError(
                f"encoding column {column.name!r} as {column.type}: {type(exc).__name__}: {exc}"
            ) from exc
    if times is not None:
        arrays.append(pa.array(times, pa.int64()))
    arrays.append(pa.array(diffs, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


def decode_block(table: pa.Table, columns: Sequence[Column], *, time: int | None = None) -> Block:
    """The updates of a base or pending table as a block, column by column with no row in between:
    int fields as int64 arrays, str, bytes, float and bool fields as lists (one Arrow call each),
    ``any`` fields and whole records as lists (one msgpack call per column), the records as
    `RecordColumns` (a list of the whole records for an input without declared fields). ``time``:
    the time of every update (a base table has none); else the table's ``time`` column."""
    values = [_column(table.column(f"f{i}"), column.type) for i, column in enumerate(columns)]
    n = table.num_rows
    records = values[0] if _whole(columns) else RecordColumns(values)
    times = np.full(n, time, dtype=np.int64) if time is not None else _ints(table.column("time"))
    return Block(records, times, _ints(table.column("diff")))


def decode_records(table: pa.Table, columns: Sequence[Column]) -> list[Any]:
    """The records of a base or pending table, as the engine sees them (tuples of field values)."""
    block = decode_block(table, columns, time=0)
    return block.record_list()


def joined(blocks: Sequence[Block]) -> Block:
    """One block of ``blocks`` in order (an empty one when there are none)."""
    return Block.concat(blocks) if blocks else Block([], np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def owned(block: Block, index: int, count: int) -> Block:
    """The updates of ``block`` whose key hash is ``index`` modulo ``count`` (`shard_of`): worker
    ``index``'s share of ``count``, found from the key column."""
    if not len(block):
        return block
    records = block.records
    if type(records) is RecordColumns:
        keys = records.columns[0]
        keys = keys.tolist() if isinstance(keys, np.ndarray) else keys
    else:
        keys = list(map(record_key, records))
    return block.take(shard_ids(keys, count) == index)


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy().astype(np.int64, copy=False)


def _column(column: pa.ChunkedArray, kind: str) -> np.ndarray | list:
    """A stored column's values as the engine's record columns take them."""
    if kind == "int64":
        return _ints(column)
    if kind != "msgpack":
        return column.to_pylist()
    out: list = []
    for chunk in column.chunks:  # each value is one msgpack object: one array of them per chunk
        n = len(chunk)
        if n == 0:
            continue
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset : chunk.offset + n + 1]
        if chunk.null_count or (np.diff(offsets) <= 0).any():
            raise SnapshotError(f"a msgpack column holds {chunk.null_count} nulls or an empty value")
        body = memoryview(chunk.buffers()[2])[offsets[0] : offsets[-1]]
        try:
            out.extend(msgpack.unpackb(b"\xdd" + n.to_bytes(4, "big") + body, raw=False, use_list=False,
                                       strict_map_key=False))
        except Exception as exc:  # ExtraData, FormatError, ValueError...: not one object per value
            raise SnapshotError(f"a msgpack column does not hold one msgpack value per row ({exc})") from exc
    return out


class _HashingFile:
    """A binary file that hashes and counts what is written through it."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "wb")
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.size += view.nbytes
        return self.file.write(view)

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.size

    def close(self) -> None:
        if not self.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.closed = True


class ShardFileWriter:
    """Streams record batches of one shard into ``root/relative`` as Parquet (zstd), hashing as it
    goes; `close` fsyncs and returns the manifest entry. The daemon and the Spark executors both
    write shard files with it, so the files are alike whoever writes them."""

    def __init__(self, root: Path, relative: str, schema: pa.Schema, shard: int) -> None:
        self.relative = relative
        self.shard = shard
        self.rows = 0
        path = Path(root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _HashingFile(path)
        self._writer = pq.ParquetWriter(pa.PythonFile(self._file, mode="w"), schema, compression="zstd")

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        if isinstance(data, pa.RecordBatch):
            self._writer.write_batch(data)
        else:
            self._writer.write_table(data)
        self.rows += data.num_rows

    def close(self) -> FileEntry:
        self._writer.close()
        self._file.close()
        return FileEntry(self.relative, self.shard, self.rows, self._file.size, self._file.sha256.hexdigest())


def write_table_file(root: Path, relative: str, table: pa.Table, shard: int) -> FileEntry:
    """Write ``table`` as Parquet at ``root/relative`` (fsynced) and describe it for the manifest."""
    writer = ShardFileWriter(root, relative, table.schema, shard)
    writer.write(table)
    return writer.close()


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the snapshot directory
    shard: int
    rows: int
    bytes: int
    sha256: str
