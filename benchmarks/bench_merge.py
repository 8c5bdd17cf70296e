"""Benchmark: merging traces' batches, the kernel alone and a trace's idle merge after a large epoch.

1. The merge kernel (``kernels.merge.cascade``) on two tries of ``--updates`` updates each, times of
   two coordinates advanced by a frontier: random keys (few shared) and keys shared by both tries
   (``--keys`` distinct keys, 10 vals). Prints ns per update merged and, as the baseline measured in
   the same run, numpy concatenating the same four columns (the least a merge must move).
2. A trace's idle merge after an epoch (``Spine.exert``): a loop's rounds leave one batch per round,
   a wave of sizes (``--rounds`` rounds, doubling up to the middle round, then halving back) that
   no merge touched inside the epoch (a reader held the rounds apart). Prints the updates the merges
   read against the trace's updates, the batches left and the CPU time; ``--cascade`` merges them as
   one cascade from the newest backwards instead of pair by pair (the order before 7572c0b), to
   compare in one run. The trace's contents are checked against the inserted updates.

    .venv/bin/python benchmarks/bench_merge.py [--updates 1000000 --keys 1000000 --rounds 21 --cascade]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ddflow.operators.frontier import Antichain
from ddflow.operators.kernels import merge, trie
from ddflow.operators.traces import spine as spines
from ddflow.operators.traces.batch import Updates, concat
from ddflow.operators.traces.spine import Spine


def trie_of(rng: np.random.Generator, n: int, key_range: int, vals: int, round_: int):
    """A trie of about ``n`` updates (distinct ``(key, val)``, one update each at time ``(0, round_)``)."""
    keys = np.sort(rng.integers(0, key_range, n))
    v = rng.integers(0, vals, n)
    order = np.lexsort((v, keys))
    keys, v = keys[order], v[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = (keys[1:] != keys[:-1]) | (v[1:] != v[:-1])
    keys, v = keys[first], v[first]
    times = np.zeros((len(keys), 2), dtype=np.int64)
    times[:, 1] = round_
    columns = (keys, v, times, np.ones(len(keys), dtype=np.int64))
    buffer, address, nk, nv = trie.build(*columns)
    return buffer, (address, nk, nv, len(keys)), columns


def kernel_merge(updates: int, key_range: int, vals: int, repeats: int = 3) -> tuple[float, float, int]:
    """``(seconds per merge, seconds of the numpy baseline, updates merged)``, best of ``repeats``."""
    rng = np.random.default_rng(7)
    a_buf, a_row, a_cols = trie_of(rng, updates, key_range, vals, 0)
    b_buf, b_row, b_cols = trie_of(rng, updates, key_range, vals, 1)
    table = np.array([a_row, b_row], dtype=np.int64)
    frontier = np.array([[1, 0]], dtype=np.int64)
    frontier.flags.writeable = False
    total = a_row[3] + b_row[3]
    size = trie.size(a_row[1] + b_row[1], a_row[2] + b_row[2], total, 2)
    merge.cascade(table, 0, 2, frontier, 1 << 62, np.empty(size, dtype=np.int64), 0)  # loaded (or compiled)
    best = base = float("inf")
    for _ in range(repeats):
        out = np.empty(size, dtype=np.int64)
        started = time.perf_counter()
        count = merge.cascade(table, 0, 2, frontier, 1 << 62, out, 0)[0]
        best = min(best, time.perf_counter() - started)
        assert count == 2
        started = time.perf_counter()
        for x, y in zip(a_cols, b_cols):
            np.concatenate([x, y])
        base = min(base, time.perf_counter() - started)
    return best, base, total


def wave(rounds: int, peak: int) -> list[int]:
    """Batch sizes of a loop's rounds: doubling up to ``peak`` at the middle round, then halving."""
    half = rounds // 2
    return [max(1, peak >> abs(half - k)) for k in range(rounds)]


def idle_merge(rounds: int, peak: int, key_range: int, cascade: bool) -> tuple[float, int, int, int, int]:
    """``(CPU seconds, updates read, trace updates, batches before, batches after)`` of the idle merge
    of one epoch's round batches (see the module)."""
    rng = np.random.default_rng(11)
    trace = Spine(2)
    reader = trace.handle()
    inserted = []
    sizes = wave(rounds, peak)
    for k, n in enumerate(sizes):
        keys = rng.integers(0, key_range, n)
        u = Updates((keys, rng.integers(0, 10, n)), np.tile(np.array([0, k], dtype=np.int64), (n, 1)),
                    np.ones(n, dtype=np.int64))
        upper = Antichain([(0, k + 1), (1, 0)]) if k + 1 < rounds else Antichain([(1, 0)])
        trace.insert(u, upper)
        inserted.append(u)
    reader.set_compaction(Antichain([(1, 0)]))
    before, work = trace.stats()["batches"], trace.merge_work
    records = len(trace)
    pairwise = spines._PAIRWISE_FROM
    if cascade:
        spines._PAIRWISE_FROM = 1 << 62
    try:
        started = time.process_time()
        trace.exert()
        seconds = time.process_time() - started
    finally:
        spines._PAIRWISE_FROM = pairwise
    if accumulated(trace.contents()) != accumulated(concat(inserted, 2, 2)):
        raise SystemExit("the trace's accumulations after the idle merge differ from the updates inserted")
    return seconds, trace.merge_work - work, records, before, trace.stats()["batches"]


def accumulated(u: Updates) -> dict:
    """Per ``(key, val)`` its total: what every time at or after ``(1, rounds)`` sees."""
    out: dict = {}
    for k, v, d in zip(u.data[0].tolist(), u.data[1].tolist(), u.diffs.tolist()):
        out[(k, v)] = out.get((k, v), 0) + d
    return {kv: d for kv, d in out.items() if d}


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=1_000_000, help="updates per trie of the kernel merges")
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys of the shared-key merge")
    parser.add_argument("--rounds", type=int, default=21, help="round batches of the idle merge")
    parser.add_argument("--peak", type=int, default=200_000, help="updates of the largest round batch")
    parser.add_argument("--cascade", action="store_true", help="the idle merge as one cascade too, to compare")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    for label, key_range in (("random keys", 1 << 40), ("shared keys", args.keys)):
        seconds, base, total = kernel_merge(args.updates, key_range, 10)
        print(f"merge kernel, {label}: {total:,} updates in {seconds * 1e3:.0f} ms = {seconds / total * 1e9:.0f} ns "
              f"per update; numpy concatenating the columns {base / total * 1e9:.1f} ns per update "
              f"(x{seconds / base:.1f})")
    for cascade in ((False, True) if args.cascade else (False,)):
        seconds, read, records, before, after = idle_merge(args.rounds, args.peak, args.keys, cascade)
        print(f"idle merge of {before} round batches ({records:,} updates), "
              f"{'one cascade' if cascade else 'pair by pair'}: {read:,} updates read ({read / records:.1f} per "
              f"update), {after} batch{'es' if after != 1 else ''} left, {seconds:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
