"""Benchmark: consolidation of 10M updates against numpy's sort of one packed int64 column.

Updates ``(id, time, diff)`` as a service produces them: ids in a range of a few million (each id
updated a few times), nanosecond times with many distinct values (uniform over one second), diffs
+1/-1. The baseline, measured in the same run, is ``numpy.sort`` of one int64 column of the same
length holding each update's id and time packed together: the sort that consolidation cannot avoid.
Consolidation (``traces.batch.consolidate``) must also find the columns' ranges, pack, sum the diffs
of equal (id, time) and write the output columns. Times are CPU times (best of ``--repeat``), robust
when other processes share the cores.

The result is checked: sorted, distinct (id, time), no zero diff, the total diff unchanged, and the
updates of a sample of ids equal to the reference implementation's consolidation of theirs.
``--stages`` also times the kernel's passes one by one (where the time goes).

    .venv/bin/python benchmarks/bench_consolidate.py [--updates 10000000 --ids 4000000 --keyed --stages]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ddflow.operators.kernels import consolidate as kernel
from ddflow.operators.kernels.sorting import msd_sort
from ddflow.operators.traces.batch import Updates, consolidate


def random_updates(n: int, ids: int, keyed: bool, seed: int) -> Updates:
    rng = np.random.default_rng(seed)
    data = (rng.integers(0, ids, n),) + ((rng.integers(0, 16, n),) if keyed else ())
    times = rng.integers(0, 1_000_000_000, (n, 1))
    diffs = np.where(rng.random(n) < 0.5, -1, 1).astype(np.int64)
    return Updates(data, times, diffs)


def packed_column(u: Updates) -> np.ndarray:
    """Each update's data and time in one int64 (what ``numpy.sort`` sorts as the baseline)."""
    key = u.data[0].copy()
    for c in [*u.data[1:], u.times[:, 0]]:
        key <<= int(c.max()).bit_length()
        key |= c
    return key


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    return best, result


def check(u: Updates, c: Updates, sample: int, seed: int) -> None:
    cols = [*c.data, c.times[:, 0]]
    o = np.lexsort(cols[::-1])
    assert np.array_equal(o, np.arange(len(c))), "consolidated updates are not sorted"
    same = np.ones(len(c) - 1, dtype=bool)
    for col in cols:
        same &= col[1:] == col[:-1]
    assert not same.any(), "a (data, time) appears twice"
    assert np.all(c.diffs != 0), "a zero diff survived"
    assert int(c.diffs.sum()) == int(u.diffs.sum()), "the total diff changed"
    ids = np.random.default_rng(seed).choice(np.unique(u.data[0]), sample, replace=False)
    mine, theirs = np.isin(u.data[0], ids), np.isin(c.data[0], ids)
    want = kernel.consolidate_reference(tuple(col[mine] for col in u.data), u.times[mine], u.diffs[mine])
    got = (tuple(col[theirs] for col in c.data), c.times[theirs], c.diffs[theirs])
    assert all(np.array_equal(a, b) for a, b in zip(want[0], got[0])), "sample: data differ from the reference"
    assert np.array_equal(want[1], got[1]) and np.array_equal(want[2], got[2]), "sample: differs from the reference"


def stages(u: Updates, repeat: int) -> None:
    """CPU time of each pass of the kernel, on the same updates."""
    k, n = len(u.data), len(u)
    block = np.stack(u.data) if k > 1 else u.data[0].reshape(1, n)
    t = lambda name, fn: print(f"    {name:<38}{best_of(repeat, fn)[0]:.3f} s")
    lo, hi = kernel._bounds(block, u.times, u.diffs)
    widths = np.array([int(hi[j] - lo[j]).bit_length() for j in range(k + 1)])
    dw = int(hi[k + 1] - lo[k + 1]).bit_length()
    keys, out = np.empty(n, dtype=np.uint64), np.empty((k + 2) * n, dtype=np.int64)
    od, ot, odf = out[: k * n].reshape(k, n), out[k * n : (k + 1) * n].reshape(n, 1), out[(k + 1) * n :]
    print("  where the time goes (each pass alone):")
    if k > 1:
        t("stack the data columns", lambda: np.stack(u.data))
    t("column ranges", lambda: kernel._bounds(block, u.times, u.diffs))
    t("pack rows and diffs into uint64 keys", lambda: kernel._pack(block, u.times, u.diffs, lo, widths, dw, keys))
    packed = keys.copy()

    def sort():
        keys[:] = packed
        msd_sort(keys, None, out[:n].view(np.uint64), None, dw, dw + int(widths.sum()))
    t("copy the keys (part of the next line)", lambda: keys.__setitem__(slice(None), packed))
    t("radix sort of the keys", sort)
    t("sum runs, unpack the output columns", lambda: kernel._sum_packed(keys, keys.copy(), block, u.times, lo, widths,
                                                                         dw, od, ot, odf))
    t("allocate and touch the buffers", lambda: (np.ones(n, dtype=np.uint64), np.ones((k + 2) * n, dtype=np.int64)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=10_000_000)
    parser.add_argument("--ids", type=int, default=4_000_000, help="distinct ids the updates are drawn from")
    parser.add_argument("--keyed", action="store_true", help="(key, val) records: 16 vals per key")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--sample", type=int, default=2_000, help="ids checked against the reference")
    parser.add_argument("--stages", action="store_true", help="also time the kernel's passes one by one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    u = random_updates(args.updates, args.ids, args.keyed, args.seed)
    column = packed_column(u)
    consolidate(random_updates(1000, 100, args.keyed, 1))  # compile or load the kernels first
    sort_s, _ = best_of(args.repeat, lambda: np.sort(column))
    consolidate_s, c = best_of(args.repeat, lambda: consolidate(u))
    check(u, c, args.sample, args.seed)
    n = args.updates
    shape = "(key, val)" if args.keyed else "id"
    print(f"consolidate: {n:,} updates ({shape}, ns time, +-1) over {args.ids:,} ids -> {len(c):,} "
          f"(best CPU time of {args.repeat}; checked, {args.sample:,} ids against the reference)")
    print(f"  numpy.sort of one packed int64 column: {sort_s:.3f} s ({n / sort_s / 1e6:.1f} M/s)")
    print(f"  consolidate:                           {consolidate_s:.3f} s ({n / consolidate_s / 1e6:.1f} M/s)")
    print(f"  ratio consolidate / sort: {consolidate_s / sort_s:.2f} (target: at most 1.0)")
    if args.stages:
        stages(u, args.repeat)


if __name__ == "__main__":
    main()
