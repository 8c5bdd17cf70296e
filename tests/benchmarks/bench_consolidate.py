"""Benchmark: consolidation of 10M random updates, as a ratio to a bare ``numpy.lexsort``.

Keyed updates ``((key, val), time, diff)`` with random keys, vals, times and +1/-1 diffs, so that a
fair share of (key, val, time) groups repeat and some cancel. The baseline, measured in the same run
on the same columns, is ``numpy.lexsort`` of the key, val and time columns alone: the sort that
consolidation cannot avoid. Consolidation adds the gathers, the segmented sum and the zero filter.
The result is checked (sorted, distinct, no zeros, total diff per key unchanged); a failed check
fails the benchmark.

    .venv/bin/python tests/benchmarks/bench_consolidate.py [--updates 10000000 --depth 1 --repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ddflow.operators.traces.batch import Updates, consolidate


def random_updates(n: int, depth: int, seed: int) -> Updates:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, n // 10, n, dtype=np.int64)
    vals = rng.integers(0, 4, n, dtype=np.int64)
    times = rng.integers(0, 64, (n, depth), dtype=np.int64)
    diffs = rng.choice(np.asarray([-1, 1], dtype=np.int64), n)
    return Updates((keys, vals), times, diffs)


def best_of(repeat: int, fn) -> tuple[float, object]:
    """Best CPU time of ``repeat`` runs (CPU time: robust when other processes share the cores)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    return best, result


def check(u: Updates, c: Updates) -> None:
    keys, vals = c.data
    order = np.lexsort([c.times[:, j] for j in range(c.depth - 1, -1, -1)] + [vals, keys])
    assert np.array_equal(order, np.arange(len(c))), "consolidated updates are not sorted"
    same = (keys[1:] == keys[:-1]) & (vals[1:] == vals[:-1]) & np.all(c.times[1:] == c.times[:-1], axis=1)
    assert not same.any(), "a (data, time) group appears twice"
    assert np.all(c.diffs != 0), "a zero diff survived"
    width = int(u.data[0].max()) + 1
    assert np.array_equal(
        np.bincount(u.data[0], weights=u.diffs, minlength=width), np.bincount(keys, weights=c.diffs, minlength=width)
    ), "total diff per key changed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=10_000_000)
    parser.add_argument("--depth", type=int, default=1, help="time coordinates (1 = outer time only)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    u = random_updates(args.updates, args.depth, args.seed)
    sort_keys = [u.times[:, j] for j in range(args.depth - 1, -1, -1)] + [u.data[1], u.data[0]]
    lexsort_s, _ = best_of(args.repeat, lambda: np.lexsort(sort_keys))
    consolidate_s, c = best_of(args.repeat, lambda: consolidate(u))
    check(u, c)
    n = args.updates
    print(f"consolidate: {n:,} updates ((key, val), {args.depth}-d time, diff) -> {len(c):,} "
          f"(best CPU time of {args.repeat})")
    print(f"  numpy.lexsort of the same columns: {lexsort_s:.2f} s ({n / lexsort_s / 1e6:.1f} M updates/s)")
    print(f"  consolidate:                       {consolidate_s:.2f} s ({n / consolidate_s / 1e6:.1f} M updates/s)")
    print(f"  ratio consolidate / lexsort: {consolidate_s / lexsort_s:.2f}")


if __name__ == "__main__":
    main()
