"""Benchmark: interning N integers (the 2018 string-interning post: 10,000,000), time and peak memory,
against a stateless vectorized numpy interning of the same batch in the same run.

ddflow runs ``ddflow.operators.library.intern`` (the diff-based collision rounds, default
``stable_hash``) on the integers ``0..N-1`` inserted at time 0 (fed as one integer column by
``update_many``, or one ``insert`` call per record with ``--feed insert``), and the clock stops when
``run()`` has completed the output. A warm-up of 10,000 records in a dataflow of its own loads the
compiled kernels before the clock starts (start-up is measured on its own; its CPU time is printed),
and the input columns are made before it, as the baselines' are. Two baselines run in the same process afterwards: ``numpy.unique``
of the same column (the floor: one sort, the cost of finding the distinct records at all), and the
same ids computed in numpy (the engine's stable hash of ``(round, record)``,
``ddflow.operators.partition.key_hash``: Python's hash of the 1-tuple of the pair's tuple hash, masked
to 63 bits, vectorized and bit-exact, with collision rounds resolved by sorting). Every ddflow id is checked against the
second baseline's; a mismatch fails the benchmark.

    .venv/bin/python benchmarks/bench_intern.py [--records 1000000]

The post's figure is ``--records 10000000`` (Rust: 6.5 s, 621 MB).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np

from ddflow.operators import Dataflow
from ddflow.operators.library import intern
from ddflow.operators.partition import finish

WARM_UP = 10_000  # records interned before the clock starts, so that the kernels are loaded

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P5 = np.uint64(2870177450012600261)
_LEN2 = np.uint64(2 ^ (2870177450012600261 ^ 3527539))


def tuple_hash(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """CPython 3.11's ``hash((a, b))`` for int arrays with ``0 <= x < 2**61 - 1`` (where ``hash(x) == x``)."""
    with np.errstate(over="ignore"):
        acc = np.full(len(b), _P5, dtype=np.uint64)
        for lane in (a, b):
            acc = acc + lane.astype(np.uint64) * _P2
            acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
            acc = acc * _P1
        acc = acc + _LEN2
    h = acc.view(np.int64)
    return np.where(h == -1, 1546275796, h)


def pair_id(rounds: np.ndarray, records: np.ndarray) -> np.ndarray:
    """``key_hash((round, record))`` (the library's id of a pair): the stable hash of the pair's tuple hash."""
    return finish(tuple_hash(rounds, records))


def numpy_intern(records: np.ndarray) -> np.ndarray:
    """Ids of distinct non-negative ``records`` by collision rounds: least ``(round, record)`` keeps its id."""
    rounds = np.zeros(len(records), dtype=np.int64)
    ids = pair_id(rounds, records)
    while True:
        order = np.argsort(ids, kind="stable")
        clash = np.flatnonzero(ids[order][1:] == ids[order][:-1])
        if len(clash) == 0:
            return ids
        members = np.unique(np.concatenate([order[clash], order[clash + 1]]))
        members = members[np.lexsort((records[members], rounds[members], ids[members]))]
        losers = members[1:][ids[members][1:] == ids[members][:-1]]
        rounds[losers] += 1
        ids[losers] = pair_id(rounds[losers], records[losers])


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--feed", choices=("column", "insert"), default="column",
                        help="one update_many of an integer column, or one insert call per record")
    return parser


def run_intern(n: int) -> None:
    """Intern ``0..n-1`` in a dataflow of its own."""
    df = Dataflow()
    records = df.new_input("records")
    intern(records.collection).capture(history=False)
    records.update_many(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))
    records.close()
    df.run()


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    n = args.records
    print(f"interning {n:,} integers 0..{n - 1:,} at one time")

    warm = time.process_time()
    run_intern(WARM_UP)  # loads the kernels (numba's one-time start-up), outside the clock
    warm = time.process_time() - warm
    before = rss_mb()
    df = Dataflow()
    records = df.new_input("records")
    probe = intern(records.collection).capture(history=False)
    # the columns are made before the clock, as numpy.unique's column is made before its own
    column, zeros, ones = (np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                           np.ones(n, dtype=np.int64)) if args.feed == "column" else (None, None, None)
    started, cpu = time.perf_counter(), time.process_time()
    if args.feed == "column":
        records.update_many(column, zeros, ones)
        del column, zeros, ones
    else:
        insert = records.insert
        for x in range(n):
            insert(x, 0)
    fed = time.perf_counter() - started
    records.close()
    df.run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = peak_rss_mb()
    print(f"kernels loaded by a warm-up of {WARM_UP:,} records first: {warm:.2f} s CPU, not counted below")
    print(f"ddflow: {seconds:.2f} s wall, {cpu:.2f} s CPU ({seconds / n * 1e6:.2f} us per record; "
          f"feeding by {args.feed} {fed:.2f} s), "
          f"peak RSS {peak:,.0f} MB (RSS {before:,.0f} MB before building the dataflow)", flush=True)
    stats = df.interner.stats()
    print(f"interner after the run: {stats['ids']:,} ids in use ({stats['reclaimed']:,} given back in "
          f"{stats['sweeps']} sweeps), {stats['bytes'] / 2**20:,.0f} MB; arrangements "
          f"{sum(s['bytes'] for s in df.arrangement_stats().values()) / 2**20:,.0f} MB", flush=True)

    column = np.arange(n, dtype=np.int64)[::-1].copy()  # descending: np.unique must sort
    started, base_cpu = time.perf_counter(), time.process_time()
    np.unique(column, return_inverse=True)
    unique, unique_cpu = time.perf_counter() - started, time.process_time() - base_cpu
    del column
    print(f"baseline numpy.unique(return_inverse=True) of the column: {unique:.3f} s wall, {unique_cpu:.3f} s CPU; "
          f"ddflow takes x{cpu / unique_cpu:,.2f} its CPU time (x{seconds / unique:,.2f} wall; target: at most x2)")
    started, base_cpu = time.perf_counter(), time.process_time()
    ids = numpy_intern(np.arange(n, dtype=np.int64))
    base, base_cpu = time.perf_counter() - started, time.process_time() - base_cpu
    print(f"baseline numpy interning (stateless, same ids): {base:.3f} s wall, {base_cpu:.3f} s CPU; ddflow "
          f"takes x{cpu / base_cpu:,.1f} its CPU time (x{seconds / base:,.1f} wall)")

    out = probe.drain()
    got = np.empty(n, dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    for (record, id_), _time, diff in out:
        if diff != 1 or seen[record]:
            raise SystemExit(f"record {record}: diff {diff}, seen before: {bool(seen[record])}")
        seen[record] = True
        got[record] = id_
    if not seen.all() or len(out) != n:
        raise SystemExit(f"{int((~seen).sum())} records without an id; {len(out)} outputs for {n} records")
    if not np.array_equal(got, ids):
        wrong = np.flatnonzero(got != ids)
        raise SystemExit(f"{len(wrong)} ids differ from the baseline's, e.g. record {wrong[0]}: "
                         f"{got[wrong[0]]} vs {ids[wrong[0]]}")
    ordered = np.sort(got)
    if (ordered[1:] == ordered[:-1]).any():
        raise SystemExit("ddflow's ids are not unique")
    print(f"checked: {n:,} unique ids, equal to the baseline's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
