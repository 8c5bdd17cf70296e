"""Benchmark: three kernels on the inputs the engine gives them, each against a numpy baseline.

* ``reduce_points``: the count reduction's round of one 1,000-update epoch of counting page views
  (1,000 views of 100 pages, each at its own time), its arguments taken from a running dataflow;
  baseline: numpy's running count per page of the same updates (a stable sort by page and a
  cumulative sum), the least work that gives the same counts.
* ``insert_tagged``: 1,000,000 new random keys into a hash table with room for them (no rehash);
  baseline: ``numpy.unique(return_inverse=True)`` of the same keys.
* ``cascade``: the spine merges of reachability 1k/2k at E=1,000 (2,000 changes), in nanoseconds per
  update read; baseline: numpy's sort of as many int64 values.

Each kernel's output is checked against its baseline where they compute the same thing (the counts,
the keys' distinct values). Prints per-call times (the best of several repeats, CPU time) and the
ratio to the baseline; compare the ratios, not the times. The kernels are loaded (or compiled)
before the clock.

    .venv/bin/python benchmarks/bench_kernel_loops.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_epoch_calls import build
from bench_reachability import workload


def best(fn, repeats: int) -> float:
    """The least CPU seconds of ``repeats`` calls of ``fn``."""
    least = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        fn()
        least = min(least, time.process_time() - started)
    return least


def batched(fn, repeats: int, per: int = 50) -> float:
    """CPU seconds per call of ``fn``, the best of ``repeats`` batches of ``per`` calls."""
    def run():
        for _ in range(per):
            fn()
    return best(run, repeats) / per


def count_round(repeats: int) -> None:
    from ddflow.config.dataflows import page_counts
    from ddflow.operators import Dataflow
    from ddflow.operators.nodes.reduce import kernel as reduce_kernel

    captured = []
    original = reduce_kernel.reduce_points

    def spy(*args):
        captured.append(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        return original(*args)

    df = Dataflow()
    session = df.new_input("views")
    capture = page_counts(df, {"views": session.collection})["page_views"].capture(history=False)
    n, per = 20_000, 1_000
    index = np.arange(n, dtype=np.int64)
    records, times, diffs = np.stack([index, index % 100], axis=1), index * 1000, np.ones(n, dtype=np.int64)
    reduce_kernel.reduce_points = spy
    try:
        for lo in range(0, n, per):
            session.update_many(records[lo : lo + per], times[lo : lo + per], diffs[lo : lo + per])
            session.advance_to((lo + per) * 1000)
            df.run()
            capture.drain_columns()
    finally:
        reduce_kernel.reduce_points = original
    args = captured[-1]
    _keys, cand_k, cand_t = args[0], args[1], args[2]
    kernel_s = batched(lambda: original(*args), repeats)

    def running_counts():
        order = np.lexsort((cand_t, cand_k))
        k = cand_k[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        ones = np.ones(len(k), dtype=np.int64)
        run = np.cumsum(ones)
        return k, run - np.repeat(run[starts] - 1, np.diff(np.r_[starts, len(k)]))

    baseline_s = batched(running_counts, repeats)
    k, counts = running_counts()
    assert len(k) == len(cand_k) and counts.max() == per // 100, "unexpected round"
    print(f"reduce_points, a count round of {len(cand_k):,} updates over {len(np.unique(cand_k))} keys: "
          f"{kernel_s * 1e6:.1f} us; numpy running counts {baseline_s * 1e6:.1f} us "
          f"(x{kernel_s / baseline_s:.2f})")


def hash_inserts(repeats: int) -> None:
    from ddflow.operators.kernels import hashtable as ht

    n = 1_000_000
    keys = np.random.default_rng(1).permutation(10 * n)[:n].astype(np.int64)
    free = np.empty(0, dtype=np.int64)

    def insert():
        slots, tags = ht.empty(ht.capacity_for(2 * n))
        return ht.insert_tagged(slots, tags, np.empty(n, dtype=np.int64), keys, 0, free, 0, 0, 1 << 40)

    out = insert()
    assert out[6] == n and np.array_equal(np.sort(out[0]), np.arange(n)), "every key a new value"
    kernel_s = best(insert, max(3, repeats // 40))
    baseline_s = best(lambda: np.unique(keys, return_inverse=True), max(3, repeats // 40))
    print(f"insert_tagged, {n:,} new keys into a table with room: {kernel_s / n * 1e9:.1f} ns per key; "
          f"numpy.unique(return_inverse=True) {baseline_s / n * 1e9:.1f} ns per key (x{kernel_s / baseline_s:.2f})")


def cascades(repeats: int) -> None:
    from ddflow.operators.traces import spine

    original = spine.merge_cascade
    spent, read = [0.0], [0]

    def timed(*args):
        started = time.process_time()
        result = original(*args)
        spent[0] += time.process_time() - started
        read[0] += int(result[6])
        return result

    e = workload(1000, 2000, 3 * 1000 + 10)
    r = build("plan", e, 1000, 2000, 10)
    r.load()
    r.slide(1000, 1000)
    spine.merge_cascade = timed
    try:
        r.slide(2000, 1000)
    finally:
        spine.merge_cascade = original
    values = np.random.default_rng(2).integers(0, 1 << 40, read[0])
    baseline_s = best(lambda: np.sort(values), max(3, repeats // 40))
    print(f"cascade, the merges of reachability 1k/2k at E=1,000 (2,000 changes): {read[0]:,} updates read, "
          f"{spent[0] / read[0] * 1e9:.1f} ns per update; numpy's sort of as many int64 "
          f"{baseline_s / read[0] * 1e9:.1f} ns per value (x{spent[0] / baseline_s:.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="repeats of each timing (the best is kept)")
    args = parser.parse_args(argv)
    count_round(args.repeats)
    hash_inserts(args.repeats)
    cascades(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
