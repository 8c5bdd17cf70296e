"""Benchmark: spine inserts of 100,000 batches of 10 updates with advancing times and compaction.

Batch ``b`` holds 5 insertions and 5 retractions of a sliding window over 10,000 distinct keyed
records (key = record // 4), every update at its own time ``10 b + i``; after each insert a reader
advances its logical and physical compaction frontiers to the new upper, so merges advance times and
cancel what left the window. Prints updates/s (by CPU time of the inserting process, robust on a
shared machine, and by wall time), the peak trace size (records, batches, bytes), and, as
a baseline measured in the same run, consolidating each batch alone (the least an insert must do).
The trace's final contents are checked against the window; a failed check fails the benchmark. The
kernels are loaded (or compiled) by a first run over the first 2,000 batches, which is not timed.

    .venv/bin/python benchmarks/bench_spine.py [--batches 100000 --size 10 --profile]

``--profile`` runs the timed calls under cProfile (times then do not count) and prints its top
functions and the function calls per insert.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from ddflow.operators.frontier import Antichain
from ddflow.operators.traces.batch import Updates, consolidate
from ddflow.operators.traces.spine import Spine

RECORDS, WINDOW = 10_000, 5_000


def make_batches(count: int, size: int) -> list[tuple[Updates, Antichain]]:
    """Sliding window: batch ``b`` inserts ``size // 2`` new records and retracts as many old ones."""
    half = size // 2
    out = []
    for b in range(count):
        steps = np.arange(b * half, (b + 1) * half, dtype=np.int64)
        old = steps[steps >= WINDOW]
        records = np.concatenate([steps % RECORDS, (old - WINDOW) % RECORDS])
        n = len(records)
        times = (b * size + np.arange(n, dtype=np.int64)).reshape(n, 1)
        diffs = np.concatenate([np.ones(half, dtype=np.int64), -np.ones(len(old), dtype=np.int64)])
        out.append((Updates((records // 4, records), times, diffs), Antichain([(b + 1) * size])))
    return out


def run_spine(batches: list[tuple[Updates, Antichain]], profiler: cProfile.Profile | None = None
              ) -> tuple[float, float, Spine, dict[str, int]]:
    """Insert every batch, the reader compacting after each; ``(wall s, cpu s, trace, peak sizes)``.

    Only the inserts and the compaction calls are timed (and profiled, with ``profiler``), not the
    size bookkeeping.
    """
    trace = Spine(1, "bench")
    reader = trace.handle()
    peak = {"records": 0, "batches": 0, "bytes": 0}
    wall = cpu = 0.0
    for u, upper in batches:
        w0, c0 = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        trace.insert(u, upper)
        reader.set_logical_compaction(upper)
        reader.set_physical_compaction(upper)
        if profiler is not None:
            profiler.disable()
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        stats = trace.stats()
        for k in peak:
            peak[k] = max(peak[k], stats[k])
    trace.reader = reader  # keep the hold alive until the check
    return wall, cpu, trace, peak


def check(trace: Spine, count: int, size: int) -> None:
    half = size // 2
    steps = np.arange(max(0, count * half - WINDOW), count * half)
    c = trace.contents()
    live = {}
    for k, v, d in zip(c.data[0].tolist(), c.data[1].tolist(), c.diffs.tolist(), strict=True):
        live[(k, v)] = live.get((k, v), 0) + d
    live = {kv: n for kv, n in live.items() if n}
    assert live == {(int(r) // 4, int(r)): 1 for r in steps % RECORDS}, "trace content is not the window"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=10, help="updates per batch (even)")
    parser.add_argument("--profile", action="store_true", help="cProfile the inserts, print the top functions")
    args = parser.parse_args()

    batches = make_batches(args.batches, args.size)
    updates = sum(len(u) for u, _ in batches)

    run_spine(batches[:2_000])  # load (or compile) the kernels before timing
    for u, _ in batches[:100]:
        consolidate(u)
    started = time.process_time()
    for u, _ in batches:
        consolidate(u)
    baseline_s = time.process_time() - started

    profiler = cProfile.Profile() if args.profile else None
    wall, elapsed, trace, peak = run_spine(batches, profiler)
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
        print(f"profiled: {stats.total_calls / args.batches:.1f} Python function calls per insert "
              f"(insert and the reader's two compaction calls; builtins included)")
    check(trace, args.batches, args.size)

    final = trace.stats()
    print(f"spine insert: {args.batches:,} batches of {args.size} updates ({updates:,} updates), "
          f"a reader compacting to the upper after each")
    print(f"  spine:    {elapsed:.2f} s CPU, {updates / elapsed:,.0f} updates/s ({elapsed / args.batches * 1e6:.0f} us/batch); "
          f"wall {wall:.2f} s, {updates / wall:,.0f} updates/s")
    print(f"  baseline: consolidate each batch alone {baseline_s:.2f} s CPU, {updates / baseline_s:,.0f} updates/s; "
          f"ratio spine / baseline: {elapsed / baseline_s:.1f}")
    print(f"  peak trace size: {peak['records']:,} records, {peak['batches']} batches, {peak['bytes']:,} bytes "
          f"(live window {WINDOW:,} records); final {final['records']:,} records, {final['batches']} batches; "
          f"merge work {final['merge_work']:,} updates")


if __name__ == "__main__":
    main()
