"""Benchmark: memory on ever-new records. A window of W live records slides over N distinct records
(each inserted, retracted W records later); the process RSS must stay within 1.2x of its value after
the first 10% of the records (the issue's target: W = 10,000 over N = 10,000,000, checked at 1M).

The dataflow keys each record ``r`` by ``r % 997``, keeps the newest record per key (``max``), counts
the records per key and joins each record with its key's count; outputs are captured without history
and drained after every epoch, as the daemon does. Record ``r`` enters at time ``r`` and leaves at
``r + W``; an epoch holds ``--epoch`` records. The baseline measured in the same run is the RSS after
the first 10% (the same process, the same dataflow, warm); the figures printed at every 10% are RSS,
the interner's ids in use and the arrangements' records. The outputs are checked against the window
at the end (and the run fails if they differ or RSS grew past the target).

    .venv/bin/python benchmarks/bench_window_memory.py [--records 10000000 --window 10000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter

import numpy as np

from ddflow.operators import Dataflow

KEYS = 997


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000, help="distinct records N")
    parser.add_argument("--window", type=int, default=10_000, help="live records W")
    parser.add_argument("--epoch", type=int, default=10_000, help="records entering per epoch")
    parser.add_argument("--target", type=float, default=1.2, help="largest RSS allowed / RSS after 10%%")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    n, window, epoch = args.records, args.window, args.epoch
    print(f"a window of {window:,} live records sliding over {n:,} distinct records, {epoch:,} per epoch")
    df = Dataflow()
    records = df.new_input("records")
    keyed = records.collection.map(lambda r: (r % KEYS, r))
    newest = keyed.max().capture(history=False)
    counts = keyed.map(lambda kv: kv[0]).count()
    joined = keyed.join_map(counts, lambda key, r, count: (r, count)).capture(history=False)
    newest_view: dict = {}
    joined_view: Counter = Counter()
    base = None
    worst = 0.0
    started, cpu = time.perf_counter(), time.process_time()
    checkpoint = max(epoch, n // 10)
    for lo in range(0, n, epoch):
        new = np.arange(lo, min(lo + epoch, n), dtype=np.int64)
        old = np.arange(max(0, lo - window), max(0, min(lo + epoch, n) - window), dtype=np.int64)
        records.update_many(np.concatenate([new, old]), np.concatenate([new, old + window]),
                            np.concatenate([np.ones(len(new), dtype=np.int64), -np.ones(len(old), dtype=np.int64)]))
        records.advance_to(lo + epoch)
        df.run()
        for (key, r), _t, d in newest.drain():
            if d > 0:
                newest_view[key] = r
            elif newest_view.get(key) == r:
                del newest_view[key]
        for rec, _t, d in joined.drain():
            joined_view[rec] += d
            if not joined_view[rec]:
                del joined_view[rec]
        done = lo + len(new)
        if done % checkpoint == 0 or done == n:
            rss = rss_mb()
            if base is None:
                base = rss
            worst = max(worst, rss)
            stats = df.interner.stats()
            records_held = sum(s["records"] for s in df.arrangement_stats().values())
            print(f"{done:>12,} records: RSS {rss:7.1f} MB ({rss / base:.3f}x the first 10%), ids in use "
                  f"{stats['ids']:,} (bound {stats['id_bound']:,}, {stats['reclaimed']:,} reclaimed in "
                  f"{stats['sweeps']} sweeps), arrangements {records_held:,} records, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    print(f"{n / (time.perf_counter() - started):,.0f} records/s ({time.process_time() - cpu:.1f} s CPU)")

    live = range(max(0, n - window), n)
    per_key = Counter(r % KEYS for r in live)
    want_newest = {}
    for r in live:
        want_newest[r % KEYS] = r
    if newest_view != want_newest or joined_view != {(r, per_key[r % KEYS]): 1 for r in live}:
        raise SystemExit("outputs differ from the last window")
    print(f"checked: outputs equal the last window; largest RSS {worst:.1f} MB = {worst / base:.3f}x the RSS after "
          f"the first 10% (target {args.target}x)")
    return 0 if worst <= args.target * base else 1


if __name__ == "__main__":
    sys.exit(main())
