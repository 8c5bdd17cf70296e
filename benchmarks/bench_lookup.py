"""Benchmark: looking up 1,000 random keys in a trace of 1,000,000 keys held in several batches.

The trace holds ``--keys`` distinct random keys (one val and one time each) in batches of
geometrically decreasing sizes (half, a quarter, ... of the keys, as a spine's merging leaves them),
kept apart by a reader's physical hold. Each lookup asks for ``--query`` keys drawn at random from the
trace's keys (every one found) and returns their updates from every batch in one kernel call: once
with the keys sorted and distinct (as the engine's operators pass them) and once in random order (the
kernel sorts them). Prints the time per lookup (median and 10th percentile of ``--repeat`` lookups,
each with new keys, CPU time of the process) and, as a baseline measured in the same run (lookups and
baseline interleaved, so both see the same machine), numpy's ``searchsorted`` of the same sorted keys
in one sorted array of all the trace's keys (finding them only, no gathering). Every lookup is
checked against a filter of the trace's contents; a wrong answer fails the benchmark.

    .venv/bin/python benchmarks/bench_lookup.py [--keys 1000000 --query 1000 --batches 5 --repeat 300]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ddflow.operators.frontier import Antichain
from ddflow.operators.traces.batch import Updates
from ddflow.operators.traces.spine import Spine


def build(keys: np.ndarray, batches: int) -> Spine:
    """A trace of ``keys`` (shuffled) in ``batches`` batches of sizes n/2, n/4, ..., the last the rest."""
    trace = Spine(1, "bench")
    reader = trace.handle()  # its physical hold at the start keeps every batch apart
    trace.reader = reader
    sizes = [len(keys) >> (i + 1) for i in range(batches - 1)]
    sizes.append(len(keys) - sum(sizes))
    start = 0
    for t, size in enumerate(sizes):
        part = np.sort(keys[start : start + size])
        start += size
        n = len(part)
        trace.insert(Updates((part, part % 7), np.full((n, 1), t, dtype=np.int64), np.ones(n, dtype=np.int64)),
                     Antichain([t + 1]))
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--query", type=int, default=1_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()

    rng = np.random.default_rng(7)
    keys = rng.choice(1 << 40, args.keys, replace=False).astype(np.int64)
    trace = build(keys, args.batches)
    sizes = [len(b) for b in trace.batches()]
    queries = [rng.choice(keys, args.query, replace=False) for _ in range(args.repeat)]
    trace.lookup(queries[0])  # load (or compile) the kernel before timing

    flat = np.sort(keys)
    ordered = [np.sort(rng.choice(keys, args.query, replace=False)) for _ in range(args.repeat)]
    presorted = [np.sort(q) for q in queries]
    sorted_s, random_s, base = [], [], []
    for q, o, p in zip(queries, ordered, presorted, strict=True):  # different keys: no lookup warms another's
        t0 = time.process_time()
        trace.lookup(o)
        t1 = time.process_time()
        trace.lookup(q)
        t2 = time.process_time()
        np.searchsorted(flat, p)
        t3 = time.process_time()
        sorted_s.append(t1 - t0)
        random_s.append(t2 - t1)
        base.append(t3 - t2)

    contents = trace.contents()
    for q in queries[:5]:
        got = trace.lookup(q)
        mask = np.isin(contents.data[0], q)
        order = np.argsort(contents.data[0][mask], kind="stable")
        assert np.array_equal(got.data[0], contents.data[0][mask][order]), "lookup keys differ from a filter"
        assert np.array_equal(got.data[1], contents.data[1][mask][order]), "lookup vals differ from a filter"
        assert np.array_equal(got.times, contents.times[mask][order]) and len(got) == args.query

    def figures(seconds: list[float]) -> tuple[float, float]:
        us = sorted(t * 1e6 for t in seconds)
        return statistics.median(us), us[len(us) // 10]

    (sm, sp), (rm, rp), (bm, bp) = figures(sorted_s), figures(random_s), figures(base)
    print(f"trace lookup: {args.query:,} random keys in a trace of {args.keys:,} keys in {len(sizes)} batches "
          f"({', '.join(f'{s:,}' for s in sizes)}); {args.repeat} lookups each, CPU time")
    print(f"  lookup, sorted keys:   median {sm:.0f} us (p10 {sp:.0f} us)")
    print(f"  lookup, keys in random order: median {rm:.0f} us (p10 {rp:.0f} us)")
    print(f"  baseline: numpy searchsorted of sorted keys in one sorted array of all keys: median {bm:.0f} us "
          f"(p10 {bp:.0f} us); ratio sorted lookup / baseline {sm / bm:.2f}")


if __name__ == "__main__":
    main()
