"""Snapshots: input collections consolidated at a frontier, sharded by key, with a checked manifest.

A snapshot at frontier ``F`` holds, for each input collection of a dataflow,

* ``base``: the collection accumulated over every time ``< F`` - each record with its summed
  diff (all times advanced to ``F``, zero sums dropped);
* ``pending``: updates already read whose times are ``>= F``, consolidated per (record, time). A
  checkpoint has them because the consumed input offsets run ahead of the frontier; a backfill
  has them when its archive reaches past ``F``;
* ``offsets``: per partition of the input topic, the offset where consumption resumes.

Both parts are split into ``shards`` Parquet files by the hash of the record's key (its first
field): ``key_hash(key) % shards`` (`shard_of`, the engine's stable key hash), the same function
in the daemon and in the Spark backfill, so a worker that owns a range of key hashes reads only
its shards. The format names the hash: ``ddflow-snapshot/2`` shards by ``key_hash``; a
``ddflow-snapshot/1`` snapshot (sharded by an older hash, ``crc32`` of the key's msgpack bytes) is
still read whole, and refuses to be read by shard, where its shards would hold other keys. Layout::

    NAME/MANIFEST.json                  frontier, shards, per input: topic, columns, offsets,
                                        files (shard, rows, bytes, sha256); its own sha256
    NAME/input-0/base-00003.parquet     columns f0..fN (the fields) and diff
    NAME/input-0/pending-00003.parquet  columns f0..fN, time and diff

Columns follow the input's declared field types (`shards` has the file format).

A snapshot is written into a hidden temporary directory and renamed into place only after every
file and the manifest are fsynced, so NAME exists complete or not at all. Opening one checks the
manifest's checksum; reading checks each file's size, sha256 and schema. A torn or corrupt
snapshot raises `SnapshotError` naming the file and what differs.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..block import Block
from ..durable import fsync_dir
from ..exceptions import SnapshotError
from .manifest import FORMAT, LEGACY_FORMATS, MANIFEST, InputEntry, Manifest
from .shards import (
    Column,
    FileEntry,
    ShardFileWriter,
    arrow_schema,
    columns_for_fields,
    decode_block,
    decode_records,
    encode_table,
    joined,
    owned,
    record_key,
    shard_ids,
    shard_of,
    write_table_file,
)
from ...operators.lattice import T_MAX, T_MIN

__all__ = [
    "Snapshot",
    "SnapshotWriter",
    "prepare_writes",
    # re-exported from `manifest`, what a snapshot holds
    "FORMAT",
    "MANIFEST",
    "InputEntry",
    "Manifest",
    # re-exported from `shards`, the format of the files
    "Column",
    "FileEntry",
    "ShardFileWriter",
    "arrow_schema",
    "columns_for_fields",
    "decode_records",
    "encode_table",
    "record_key",
    "shard_ids",
    "shard_of",
    "write_table_file",
]

# -- writing -----------------------------------------------------------------------------------------


def prepare_writes() -> None:
    """Pay the one-time start-up of a snapshot write now: pyarrow's first conversion of Python
    values imports pandas (0.5-1 s on 2 shared cores, more while other threads hold the GIL). A
    worker calls this when it is built, so its first checkpoint written in the background takes
    milliseconds rather than outliving a worker that crashes soon after starting."""
    pa.array([], pa.int64())


class SnapshotWriter:
    """Writes one snapshot atomically: add inputs, then `commit` (or `abort`).

    ``staging`` is the hidden directory files go to before the rename; the Spark job writes its
    shard files there from the executors and registers them with `add_files`.
    """

    def __init__(self, path: str | os.PathLike[str], frontier: int, *, shards: int, origin: str) -> None:
        if type(shards) is not int or shards <= 0:
            raise SnapshotError(f"writing a snapshot: shards must be a positive int, got {shards!r}")
        if type(frontier) is not int or not T_MIN < frontier <= T_MAX:
            raise SnapshotError(f"writing a snapshot: frontier {frontier!r} is not an int64 time above T_MIN")
        self.path = Path(path)
        if self.path.exists():
            raise SnapshotError(f"writing a snapshot: {self.path} already exists")
        self.frontier = frontier
        self.shards = shards
        self.origin = origin
        self.staging = self.path.parent / f".{self.path.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.staging.mkdir(parents=True)
        self._inputs: dict[str, InputEntry] = {}

    def input_dir(self, name: str) -> str:
        """The relative directory of an input's files (by position: names need not be path-safe)."""
        index = list(self._inputs).index(name) if name in self._inputs else len(self._inputs)
        return f"input-{index}"

    def add_input(
        self,
        name: str,
        topic: str,
        columns: Sequence[Column],
        base: Mapping[Any, int] | Iterable[tuple[Any, int]],
        pending: Iterable[tuple[Any, int, int]] = (),
        offsets: Mapping[int, int] | None = None,
        *,
        counts: np.ndarray | None = None,
    ) -> InputEntry:
        """Add an input from its accumulated ``base`` and its ``pending`` updates at times
        ``>= frontier``. ``base``: a mapping record -> count (taken as consolidated: each record
        once; zero counts are skipped), (record, diff) pairs (consolidated here), or with
        ``counts`` (int64, one per record) the records, each once, of those counts."""
        if counts is not None:
            records = list(base)  # type: ignore[arg-type]
            diffs = np.asarray(counts, dtype=np.int64)
            if len(diffs) != len(records):
                raise SnapshotError(f"snapshot input {name!r}: {len(records)} records but {len(diffs)} counts")
            if not diffs.all():
                keep = np.flatnonzero(diffs)
                records, diffs = [records[i] for i in keep.tolist()], diffs[keep]
        elif isinstance(base, Mapping):
            records = list(base)
            diffs = np.fromiter(base.values(), dtype=np.int64, count=len(records))
            if not diffs.all():
                keep = np.flatnonzero(diffs)
                records, diffs = [records[i] for i in keep.tolist()], diffs[keep]
        else:
            acc: dict[Any, int] = {}
            for record, diff in base:
                acc[record] = acc.get(record, 0) + diff
            records = [r for r, d in acc.items() if d]
            diffs = np.fromiter((d for d in acc.values() if d), dtype=np.int64, count=len(records))
        at: dict[tuple[Any, int], int] = {}
        for record, t, diff in pending:
            if t < self.frontier:
                raise SnapshotError(f"snapshot input {name!r}: pending update at time {t} is below the frontier "
                                    f"{self.frontier}: {record!r:.120}")
            at[(record, t)] = at.get((record, t), 0) + diff
        later = [(r, t, d) for (r, t), d in at.items() if d]
        directory = self.input_dir(name)
        base_files = self._write_part(directory, "base", columns, records, diffs, None)
        pending_files = self._write_part(directory, "pending", columns, [u[0] for u in later],
                                         [u[2] for u in later], [u[1] for u in later])
        return self.add_files(name, topic, columns, offsets, base_files, pending_files)

    def _write_part(
        self,
        directory: str,
        part: str,
        columns: Sequence[Column],
        records: Sequence[Any],
        diffs: Sequence[int] | np.ndarray,
        times: Sequence[int] | None,
    ) -> list[FileEntry]:
        """Encode all updates once, order them by shard, and write one file per non-empty shard."""
        if not len(records):
            return []
        try:
            shards = shard_ids(map(record_key, records), self.shards)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SnapshotError(f"writing {directory}/{part}: a record key cannot be hashed as msgpack "
                                f"({exc})") from exc
        table = encode_table(records, diffs, columns, times)
        order = np.argsort(shards, kind="stable")
        table = table.take(pa.array(order))
        counts = np.bincount(shards, minlength=self.shards)
        files = []
        start = 0
        for shard, count in enumerate(counts.tolist()):
            if count:
                relative = f"{directory}/{part}-{shard:05d}.parquet"
                files.append(write_table_file(self.staging, relative, table.slice(start, count), shard))
            start += count
        return files

    def add_files(
        self,
        name: str,
        topic: str,
        columns: Sequence[Column],
        offsets: Mapping[int, int] | None,
        base: Sequence[FileEntry],
        pending: Sequence[FileEntry] = (),
    ) -> InputEntry:
        """Register an input whose files are already in `staging` (written by `write_table_file`)."""
        if name in self._inputs:
            raise SnapshotError(f"writing a snapshot: input {name!r} added twice")
        entry = InputEntry(name, topic, tuple(columns), None if offsets is None else dict(offsets),
                           tuple(sorted(base, key=lambda f: (f.shard, f.path))),
                           tuple(sorted(pending, key=lambda f: (f.shard, f.path))))
        self._inputs[name] = entry
        return entry

    def commit(self, extra: Mapping[str, Any] | None = None) -> Path:
        """Write the manifest and rename the snapshot into place; returns its path."""
        manifest = Manifest(self.frontier, self.shards, self.origin,
                            datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
                            dict(self._inputs), dict(extra or {}))
        with open(self.staging / MANIFEST, "w") as f:
            f.write(manifest.to_json())
            f.flush()
            os.fsync(f.fileno())
        files = [e for i in self._inputs.values() for e in i.base + i.pending]
        for directory in {self.staging / Path(e.path).parent for e in files}:
            fsync_dir(directory)
        fsync_dir(self.staging)
        os.rename(self.staging, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self.staging.exists():
            self.abort()


# -- reading -----------------------------------------------------------------------------------------


class Snapshot:
    """A snapshot on disk; `open` checks its manifest, reading checks every file it touches."""

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Snapshot:
        path = Path(path)
        where = f"snapshot {path}"
        if not path.is_dir():
            raise SnapshotError(f"{where}: no such directory")
        manifest_path = path / MANIFEST
        try:
            text = manifest_path.read_text()
        except FileNotFoundError as exc:
            raise SnapshotError(f"{where}: no {MANIFEST} (an interrupted write, or not a snapshot)") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise SnapshotError(f"{where}: reading {MANIFEST}: {exc}") from exc
        return cls(path, Manifest.from_json(text, f"{where}: {MANIFEST}"))

    @property
    def frontier(self) -> int:
        return self.manifest.frontier

    @property
    def inputs(self) -> dict[str, InputEntry]:
        return self.manifest.inputs

    @property
    def identity(self) -> str:
        """What tells this snapshot from another, wherever it is copied: ``frontier@digest``
        (the start of the sha256 of its manifest, which names every file's sha256)."""
        return f"{self.frontier}@{hashlib.sha256(self.manifest.to_json().encode()).hexdigest()[:16]}"

    def files(self) -> list[tuple[InputEntry, FileEntry, bool]]:
        return [(e, f, pending) for e in self.inputs.values()
                for pending, part in ((False, e.base), (True, e.pending)) for f in part]

    @property
    def size_bytes(self) -> int:
        return sum(f.bytes for _, f, _ in self.files())

    def _read_bytes(self, f: FileEntry) -> bytes:
        where = f"snapshot {self.path}: {f.path}"
        if ".." in Path(f.path).parts or Path(f.path).is_absolute():
            raise SnapshotError(f"{where}: the path leaves the snapshot directory")
        try:
            data = (self.path / f.path).read_bytes()
        except FileNotFoundError as exc:
            raise SnapshotError(f"{where}: the file is missing") from exc
        except OSError as exc:
            raise SnapshotError(f"{where}: {exc}") from exc
        if len(data) != f.bytes:
            raise SnapshotError(f"{where}: {len(data)} bytes, the manifest says {f.bytes} (torn or truncated)")
        digest = hashlib.sha256(data).hexdigest()
        if digest != f.sha256:
            raise SnapshotError(f"{where}: sha256 {digest[:16]}... differs from the manifest's {f.sha256[:16]}... "
                                "(corrupt)")
        return data

    def _read_file(self, entry: InputEntry, f: FileEntry, pending: bool) -> pa.Table:
        data = self._read_bytes(f)
        where = f"snapshot {self.path}: {f.path}"
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowException, OSError) as exc:
            raise SnapshotError(f"{where}: not readable as Parquet ({exc})") from exc
        expected = arrow_schema(entry.columns, pending=pending)
        if table.schema.remove_metadata() != expected or table.num_rows != f.rows:
            raise SnapshotError(f"{where}: schema {table.schema.names} / {table.num_rows} rows, the manifest says "
                                f"{expected.names} / {f.rows} rows")
        return table

    def verify(self) -> None:
        """Check every file's size and sha256 (SnapshotError naming the first that differs)."""
        for _, f, _ in self.files():
            self._read_bytes(f)

    def read_input(
        self, name: str, *, shards: Iterable[int] | None = None, owner: tuple[int, int] | None = None
    ) -> tuple[list[tuple[Any, int]], list[tuple[Any, int, int]]]:
        """An input's ``base`` as (record, diff) and ``pending`` as (record, time, diff) rows (see
        `read_blocks`, which the daemon loads with)."""
        base, pending = self.read_blocks(name, shards=shards, owner=owner)
        return list(zip(base.record_list(), base.diffs.tolist())), pending.rows()

    def read_blocks(
        self, name: str, *, shards: Iterable[int] | None = None, owner: tuple[int, int] | None = None
    ) -> tuple[Block, Block]:
        """An input's ``base`` (its collection below the frontier, every update at ``frontier - 1``)
        and ``pending`` updates as blocks, read column by column (`shards.decode_block`), from every
        shard or only ``shards`` (which a snapshot of a legacy format refuses: its shards follow
        another hash, so they do not hold the keys ``shard_of`` assigns them).

        ``owner=(i, W)``: only the records worker ``i`` of ``W`` owns, those whose key hash is
        ``i`` modulo ``W`` (`shard_of(record, W) == i`); the workers' shares partition the input.
        Only the shards that can hold such keys are read: shard ``s`` holds the keys of hash ``s``
        modulo ``shards``, so with ``g = gcd(shards, W)`` the shards ``s % g == i % g``, filtered
        by key unless ``W`` divides ``shards`` (then they hold exactly worker ``i``'s keys). A
        legacy snapshot is read whole and filtered."""
        if owner is not None:
            return self._read_share(name, owner)
        entry = self.inputs.get(name)
        if entry is None:
            raise SnapshotError(f"snapshot {self.path}: no input {name!r} (it has {sorted(self.inputs)})")
        if shards is not None and self.manifest.format in LEGACY_FORMATS:
            raise SnapshotError(
                f"snapshot {self.path}: format {self.manifest.format!r} shards records by crc32 of the key's "
                f"msgpack bytes, not by the key hash of {FORMAT!r}; it can only be read whole (shards=None). "
                "Read it whole once and write a new checkpoint, or rewrite it with 'ddflow backfill'"
            )
        wanted = None if shards is None else set(shards)
        parts: tuple[list[Block], list[Block]] = ([], [])
        for is_pending, part in ((False, entry.base), (True, entry.pending)):
            for f in part:
                if wanted is None or f.shard in wanted:
                    table = self._read_file(entry, f, is_pending)
                    try:
                        block = decode_block(table, entry.columns, time=None if is_pending else self.frontier - 1)
                    except SnapshotError as exc:
                        raise SnapshotError(f"snapshot {self.path}: {f.path}: {exc}") from exc
                    parts[is_pending].append(block)
        return joined(parts[0]), joined(parts[1])

    def _read_share(self, name: str, owner: tuple[int, int]) -> tuple[Block, Block]:
        index, count = owner
        if type(count) is not int or count < 1 or type(index) is not int or not 0 <= index < count:
            raise SnapshotError(f"snapshot {self.path}: reading the share of worker {index!r} of {count!r}")
        if self.manifest.format in LEGACY_FORMATS:
            shards, exact = None, False
        else:
            g = math.gcd(self.manifest.shards, count)
            shards, exact = range(index % g, self.manifest.shards, g), g == count
        base, pending = self.read_blocks(name, shards=shards)
        return (base, pending) if exact else (owned(base, index, count), owned(pending, index, count))

    def __repr__(self) -> str:
        return f"Snapshot({str(self.path)!r}, frontier={self.frontier}, origin={self.manifest.origin!r})"
