"""Benchmark: the PySpark backfill's throughput (archive updates per second) on local Spark.

The archive is the seeds' sliding-window graph as Parquet files of updates (src, dst, time,
diff): M edges inserted, then C changes each removing edge k and adding edge M+k, every update at
its own time. The backfill consolidates it at a frontier past the last time, so the snapshot holds
the M edges of the final window; the benchmark checks that against numpy and prints the updates
per second of a cold run (the first job of a fresh Spark session, JVM and Python workers
starting) and a warm one (the same session again), next to the baseline of the same run: Spark's
own consolidation of the archive (group by edge, sum the diffs, drop zeros, count the result),
without the shard hash, the repartition and the shard files.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python benchmarks/bench_backfill.py [--edges 500000 --changes 250000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ddflow.daemon.state.backfill import BackfillInput, run_backfill, spark_session
from ddflow.daemon.state.snapshot import Snapshot
from ddflow.operators.testing import window_edges


def write_archive(directory: Path, edges: int, changes: int, nodes: int, files: int = 8) -> int:
    pairs = window_edges(nodes, edges, changes)
    src = np.concatenate([pairs[:edges, 0], pairs[:changes, 0], pairs[edges:, 0]])
    dst = np.concatenate([pairs[:edges, 1], pairs[:changes, 1], pairs[edges:, 1]])
    step = np.arange(changes)
    time_ = np.concatenate([np.arange(edges), edges + 2 * step, edges + 2 * step + 1])
    diff = np.concatenate([np.ones(edges, np.int64), -np.ones(changes, np.int64), np.ones(changes, np.int64)])
    directory.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(len(src)), files)):
        pq.write_table(pa.table({"src": src[part], "dst": dst[part], "time": time_[part], "diff": diff[part]}),
                       directory / f"part-{i:03d}.parquet")
    return len(src)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=500_000)
    parser.add_argument("--changes", type=int, default=250_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "archive"
        rows = write_archive(archive, args.edges, args.changes, args.nodes)
        window = np.random.default_rng(42).integers(0, args.nodes, (args.edges + args.changes, 2))[args.changes:]
        spark = spark_session(args.master, conf={"spark.sql.shuffle.partitions": str(2 * args.shards)})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            results = []
            for run in ("cold", "warm"):
                result = run_backfill([BackfillInput("edges", "edges", {"src": "int", "dst": "int"}, [str(archive)])],
                                      Path(tmp) / f"snapshot-{run}", shards=args.shards, spark=spark,
                                      progress=lambda line: None)
                base, pending = Snapshot.open(result.path).read_input("edges")
                assert not pending and sum(d for _, d in base) == len(window)
                assert sorted(r for r, d in base for _ in range(d)) == sorted(map(tuple, window.tolist()))
                results.append(result)
                print(f"backfill ({run}): {rows:,} updates in {result.seconds:.1f} s = "
                      f"{result.updates_per_second:,.0f} updates/s -> {sum(result.base.values()):,} records, "
                      f"{result.bytes / 1e6:.1f} MB")
            from pyspark.sql import functions as F

            started = time.perf_counter()
            consolidated = (spark.read.parquet(str(archive)).groupBy("src", "dst").agg(F.sum("diff").alias("d"))
                            .where(F.col("d") != 0).count())
            baseline = time.perf_counter() - started
            assert consolidated == len(set(map(tuple, window.tolist())))
            ratio = results[1].seconds / baseline
            print(f"baseline: Spark's own group-by-sum of the archive takes {baseline:.1f} s "
                  f"({rows / baseline:,.0f} updates/s); the warm backfill takes {ratio:.1f}x that")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
