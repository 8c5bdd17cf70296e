"""Benchmark: sliding-window reachability on 1,000,000 nodes / 2,000,000 edges / 10 roots (the 2016
roadmap's large graph): initial computation time and sustained changes/s per progress epoch E,
against a stateless numpy BFS recompute measured in the same run.

The workload and the baseline are those of ``bench_reachability.py`` (change ``k`` removes edge ``k``
and adds edge ``M + k`` at its own time ``1 + k``). One dataflow loads the graph, then absorbs
``--changes`` changes per E, for each E in turn (the phases continue the same window). The output
is checked against a BFS after the load and at the end; a mismatch fails the benchmark.

    .venv/bin/python benchmarks/bench_reachability_1m.py [--epochs 10,100,1000,10000 --changes 10000]

Smaller graphs for a quick look: ``--nodes 100000 --edges 200000 --changes 2000``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench_reachability import Reachability, ints, measure_baseline, numpy_reach, peak_rss_mb, rss_mb, workload


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--epochs", type=ints, default=(10, 100, 1_000, 10_000),
                        help="progress epoch sizes E, run one after the other")
    parser.add_argument("--changes", type=int, default=10_000, help="changes per E (at least one epoch)")
    parser.add_argument("--baseline-seconds", type=float, default=20.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    n, m, r = args.nodes, args.edges, args.roots
    per_e = {ep: max(args.changes, ep) for ep in args.epochs}
    e = workload(n, m, sum(per_e.values()))
    print(f"sliding-window reachability: {n:,} nodes, {m:,} edges, {r} roots, seed 42, "
          f"each change its own time")

    started = time.perf_counter()
    numpy_reach(e[:m, 0].copy(), e[:m, 1].copy(), n, np.arange(r))
    numpy_initial = time.perf_counter() - started
    base = measure_baseline(e, n, m, r, budget=args.baseline_seconds, max_changes=sum(per_e.values()))
    print(f"baseline (numpy BFS recompute): initial {numpy_initial:.2f} s, {base.initial_pairs:,} pairs; "
          f"{base.seconds_per_recompute:.2f} s per recompute over {base.changes} changes -> "
          f"{base.full_resolution_rate:.2f} changes/s at full resolution "
          f"({1 / base.cpu_per_recompute:.2f} per CPU s)", flush=True)

    run = Reachability(e, n, m, r)
    cpu = time.process_time()
    initial = run.load()
    cpu = time.process_time() - cpu
    loaded_rss, loaded_peak = rss_mb(), peak_rss_mb()
    pairs = run.check()
    print(f"ddflow initial computation: {initial:.1f} s ({cpu:.1f} s CPU), {pairs:,} pairs (checked by BFS), "
          f"RSS {loaded_rss:,.0f} MB, peak RSS so far {loaded_peak:,.0f} MB (the process's: the workload, "
          f"the baseline and the initial computation)", flush=True)
    print(f"{'E':>7} {'changes':>9} {'ddflow changes/s':>17} {'per CPU s':>10} {'x numpy full-res':>17} "
          f"{'RSS MB':>8}", flush=True)
    for ep, changes in per_e.items():
        phase = run.slide(changes, ep, progress=True)
        print(f"{ep:>7,} {changes:>9,} {phase.rate:>17,.1f} {changes / phase.cpu:>10,.1f} "
              f"{phase.rate / base.full_resolution_rate:>17.1f} {phase.rss[run.done]:>8,.0f}", flush=True)
    pairs = run.check()
    print(f"after {run.done:,} changes: {pairs:,} pairs (checked by BFS)")
    print(f"peak RSS {peak_rss_mb():,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
