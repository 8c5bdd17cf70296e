"""The backfill: a PySpark job that turns a history archive into a snapshot the daemon loads.

The archive of an input is Parquet files of updates: one column per record field, ``time``
(integer nanoseconds) and ``diff`` (integer). The job works on the executors; the driver only
sees counts, the largest time and one metadata row per shard file. For each input it

1. reads the files and checks them (`archive`): every declared field, ``time`` and ``diff`` present, types
   that fit the declared field types, no nulls where a type forbids them (`BackfillError` names
   the column and the count otherwise);
2. splits the updates at the frontier ``F``: those at times ``< F`` are summed per record (the
   snapshot's ``base``: times advanced to ``F``, zero sums dropped), those at ``>= F`` per record
   and time (``pending``). ``F`` defaults to one past the archive's largest time;
3. gives every record its shard with the daemon's own function (`snapshot.shard_of`: the stable
   key hash of the key, the first field), in Arrow batches, and repartitions by shard, so one
   Spark task holds whole shards;
4. writes each shard as one Parquet file with the daemon's writer (`snapshot.ShardFileWriter`)
   into the snapshot's staging directory, which must be a filesystem path the driver and the
   executors share (local, or a shared mount).

The driver then writes the manifest and renames the snapshot into place (`snapshot.SnapshotWriter`),
so a crashed job leaves no snapshot behind. Offsets where each input's live tail starts may be
given (partition -> offset); without them the daemon reads the input topics from the beginning.
A progress thread prints each Spark stage's finished/total tasks while the job runs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa

from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import BackfillError
from .archive import Progress, check_archive, read_archive
from .shards import ARROW_TYPES, Column, FileEntry, ShardFileWriter, arrow_schema, shard_ids
from .snapshot import SnapshotWriter

__all__ = ["BackfillInput", "BackfillResult", "run_backfill", "spark_session"]

def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class BackfillInput:
    """One input to backfill: its name and topic in the daemon's config, its declared fields
    (as `source.InputSpec.fields`; None: the archive's columns other than time and diff, in
    order, make the record), the archive's Parquet paths, and where its live tail starts."""

    name: str
    topic: str
    fields: Sequence[str] | Mapping[str, str] | None
    paths: Sequence[str]
    offsets: Mapping[int, int] | None = None


@dataclass
class BackfillResult:
    path: Path
    frontier: int
    seconds: float
    updates: dict[str, int] = field(default_factory=dict)  # archive rows read, per input
    base: dict[str, int] = field(default_factory=dict)  # records in the snapshot's base, per input
    pending: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    @property
    def updates_per_second(self) -> float:
        return sum(self.updates.values()) / self.seconds if self.seconds > 0 else 0.0


def spark_session(master: str = "local[*]", *, app_name: str = "ddflow-backfill",
                  conf: Mapping[str, str] | None = None) -> Any:
    """A Spark session for the backfill (``master``: local[*], spark://..., yarn, k8s://...).
    On a cluster the executors' Python must have ddflow installed (or get it with --py-files)."""
    try:
        import pandas  # noqa: F401  (PySpark's Arrow functions, which the backfill uses, need it)
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise BackfillError(f"backfill: {exc}: install ddflow's 'backfill' extra (pip install 'ddflow[backfill]')") from exc
    builder = SparkSession.builder.master(master).appName(app_name)
    defaults = {"spark.ui.showConsoleProgress": "false"}
    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        # local Python workers must import ddflow (and pyarrow, msgpack) like the driver; PySpark
        # takes the workers' interpreter from this variable when it creates the context
        os.environ["PYSPARK_PYTHON"] = sys.executable
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:
        raise BackfillError(f"backfill: starting Spark with master {master!r}: {type(exc).__name__}: {exc}") from exc


class _StageProgress:
    """Prints each running Spark stage's finished/total tasks every ``interval`` seconds."""

    def __init__(self, spark: Any, progress: Progress, interval: float = 1.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = progress
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddflow-backfill-progress", daemon=True)
        self._last: dict[int, tuple[int, int]] = {}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                state = (info.numCompletedTasks, info.numTasks)
                if self._last.get(stage_id) != state:
                    self._last[stage_id] = state
                    self.progress(f"backfill: stage {stage_id} ({info.name.split(' at ')[0]}): "
                                  f"{info.numCompletedTasks}/{info.numTasks} tasks done, {info.numActiveTasks} running")

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def run_backfill(
    inputs: Sequence[BackfillInput],
    output: str | Path,
    *,
    frontier: int | None = None,
    shards: int = 4,
    master: str = "local[*]",
    spark: Any = None,
    progress: Progress = _stderr,
    progress_interval: float = 1.0,
) -> BackfillResult:
    """Run the backfill of ``inputs`` into the snapshot directory ``output`` (which must not exist).
    ``spark``: an existing session (else one is started on ``master`` and stopped at the end)."""
    if not inputs:
        raise BackfillError("backfill: no inputs given")
    if type(shards) is not int or shards <= 0:
        raise BackfillError(f"backfill shards: expected a positive int, got {shards!r}")
    if frontier is not None and (type(frontier) is not int or not T_MIN < frontier <= T_MAX):
        raise BackfillError(f"backfill frontier: expected an int64 time above T_MIN, got {frontier!r}")
    output = Path(output).resolve()
    if output.exists():
        raise BackfillError(f"backfill: the output {output} already exists (a snapshot is never overwritten)")
    started = time.perf_counter()
    own = spark is None
    if own:
        progress(f"backfill: starting Spark on {master}")
        spark = spark_session(master)
    try:
        with _StageProgress(spark, progress, progress_interval):
            archives = {i.name: read_archive(spark, i.name, i.paths, i.fields) for i in inputs}
            stats = {i.name: check_archive(archives[i.name], i.name, len(i.paths), progress) for i in inputs}
            if frontier is None:
                ends = [s["max_time"] for s in stats.values() if s["max_time"] is not None]
                if not ends:
                    raise BackfillError("backfill: every archive is empty; give the frontier explicitly")
                frontier = max(ends) + 1
                progress(f"backfill: frontier {frontier} (one past the largest time in the archives)")
            writer = SnapshotWriter(output, frontier, shards=shards, origin="backfill")
            result = BackfillResult(output, frontier, 0.0)
            with writer:
                for i in inputs:
                    df, columns = archives[i.name].df, archives[i.name].columns
                    directory = writer.input_dir(i.name)
                    base, pending = _write_input(df, columns, shards, frontier, writer.staging, directory)
                    writer.add_files(i.name, i.topic, columns, i.offsets, base, pending)
                    result.updates[i.name] = stats[i.name]["rows"]
                    result.base[i.name] = sum(f.rows for f in base)
                    result.pending[i.name] = sum(f.rows for f in pending)
                    result.bytes += sum(f.bytes for f in base + pending)
                    progress(f"backfill: input {i.name!r}: {result.base[i.name]} records at the frontier, "
                             f"{result.pending[i.name]} pending updates, in {len(base) + len(pending)} shard files")
                writer.commit({"archives": {i.name: list(i.paths) for i in inputs}})
    finally:
        if own:
            spark.stop()
    result.seconds = time.perf_counter() - started
    progress(f"backfill: wrote {output} ({result.bytes} bytes) in {result.seconds:.1f} s, "
             f"{result.updates_per_second:,.0f} updates/s")
    return result


# -- consolidating, sharding and writing -----------------------------------------------------------------


def _write_input(df: Any, columns: Sequence[Column], shards: int, frontier: int, staging: Path,
                 directory: str) -> tuple[list[FileEntry], list[FileEntry]]:
    """Shard, consolidate and write one input; returns its (base, pending) files. One shuffle:
    rows are partitioned by shard first, and grouping by (shard, record, time or null) then
    needs no second exchange."""
    from pyspark.sql import functions as F

    values = [c for c in df.columns if c.startswith("v")]
    whole = len(columns) == 1 and columns[0].type == "msgpack" and columns[0].name == "record"
    sharder = _Sharder(values[0], shards)
    at = F.when(F.col("time") >= frontier, F.col("time")).alias("time")  # null: below F, the base
    consolidated = (
        df.mapInArrow(sharder, sharder.ddl(df))
        .repartition(shards, "_shard")
        .groupBy("_shard", *values, at)
        .agg(F.sum("diff").alias("diff"))
        .where(F.col("diff") != 0)
        .sortWithinPartitions("_shard")
    )
    written = consolidated.mapInArrow(
        _ShardWriter(str(staging), directory, columns, values, whole),
        "path string, shard int, rows long, bytes long, sha256 string, pending boolean",
    ).collect()
    files = [(FileEntry(r["path"], r["shard"], r["rows"], r["bytes"], r["sha256"]), r["pending"]) for r in written]
    return [f for f, pending in files if not pending], [f for f, pending in files if pending]


class _Sharder:
    """Adds each row's shard to Arrow batches: `snapshot.shard_of` of its record, whose key is the
    first field (``key_column``). Runs on the executors."""

    def __init__(self, key_column: str, shards: int) -> None:
        self.key_column = key_column
        self.shards = shards

    def ddl(self, df: Any) -> str:
        return ", ".join([f"{name} {kind}" for name, kind in df.dtypes] + ["_shard int"])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys = batch.column(batch.schema.get_field_index(self.key_column)).to_pylist()
            shard = pa.array(shard_ids(keys, self.shards), pa.int32())
            yield pa.RecordBatch.from_arrays(list(batch.columns) + [shard],
                                             names=list(batch.schema.names) + ["_shard"])


class _ShardWriter:
    """Writes the rows of each shard in a Spark partition (sorted by shard) to its base and
    pending Parquet files, encoding msgpack columns, and yields one metadata row per file. Runs
    on the executors."""

    def __init__(self, staging: str, directory: str, columns: Sequence[Column], values: Sequence[str],
                 whole: bool) -> None:
        self.staging = staging
        self.directory = directory
        self.types = [c.type for c in columns]
        self.values = list(values)
        self.whole = whole
        self.schemas = {False: arrow_schema(columns, pending=False), True: arrow_schema(columns, pending=True)}

    def _encode(self, table: pa.Table, pending: bool) -> pa.Table:
        pack = msgpack.Packer(use_bin_type=True).pack
        if self.whole:
            raw = [table.column(v).to_pylist() for v in self.values]
            arrays = [pa.array([pack(r) for r in zip(*raw, strict=True)] if raw else [], pa.binary())]
        else:
            arrays = []
            for kind, name in zip(self.types, self.values, strict=True):
                column = table.column(name)
                if kind == "msgpack":
                    arrays.append(pa.array([pack(v) for v in column.to_pylist()], pa.binary()))
                else:
                    arrays.append(column.cast(ARROW_TYPES[kind]))
        if pending:
            arrays.append(table.column("time"))
        arrays.append(table.column("diff"))
        return pa.Table.from_arrays(arrays, schema=self.schemas[pending])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        writers: dict[bool, ShardFileWriter] = {}
        entries: list[tuple[FileEntry, bool]] = []
        current = None
        for batch in batches:
            table = pa.Table.from_batches([batch])
            shards = table.column("_shard").to_numpy()
            for start, stop, shard in _runs(shards):
                if shard != current:
                    entries.extend((w.close(), pending) for pending, w in writers.items())
                    writers, current = {}, shard
                rows = table.slice(start, stop - start)
                is_pending = pc.is_valid(rows.column("time"))
                for pending in (False, True):
                    part = rows.filter(is_pending if pending else pc.invert(is_pending))
                    if not part.num_rows:
                        continue
                    if pending not in writers:
                        name = f"{self.directory}/{'pending' if pending else 'base'}-{shard:05d}.parquet"
                        writers[pending] = ShardFileWriter(Path(self.staging), name, self.schemas[pending], shard)
                    writers[pending].write(self._encode(part, pending))
        entries.extend((w.close(), pending) for pending, w in writers.items())
        if entries:
            yield pa.RecordBatch.from_pylist(
                [{"path": e.path, "shard": e.shard, "rows": e.rows, "bytes": e.bytes, "sha256": e.sha256,
                  "pending": pending} for e, pending in entries],
                schema=pa.schema([("path", pa.string()), ("shard", pa.int32()), ("rows", pa.int64()),
                                  ("bytes", pa.int64()), ("sha256", pa.string()), ("pending", pa.bool_())]),
            )


def _runs(shards: Any) -> list[tuple[int, int, int]]:
    """(start, stop, shard) of each run of equal shard ids in a sorted column."""
    import numpy as np

    if len(shards) == 0:
        return []
    change = np.flatnonzero(np.diff(shards)) + 1
    starts = np.concatenate(([0], change))
    stops = np.concatenate((change, [len(shards)]))
    return [(int(a), int(b), int(shards[a])) for a, b in zip(starts, stops, strict=True)]
