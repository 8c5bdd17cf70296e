"""Benchmark: connected components on a sliding window of a skewed (power-law) random graph: the
milliseconds ddflow takes to absorb one second of updates arriving at 10,000 updates/s, against a
stateless numpy recompute measured in the same run.

Graph: ``--edges`` M edges (1,000,000) over ``--nodes`` N nodes whose endpoints follow a Zipf law
(node of rank ``i`` drawn with probability proportional to ``1 / (i + 1) ** --skew``, ranks shuffled
over the node ids so that hubs do not have the least labels), ``numpy.random.default_rng(42)``.
The window slides like the reachability benchmark: change ``k`` removes edge ``k`` and adds edge
``M + k``; at ``--rate`` changes/s change ``k`` has its own time ``1 + k * 1e9 / rate`` ns. The
progress epoch closes every E changes. ddflow runs ``ddflow.operators.library.connected_components``;
its output is checked against the baseline's labels after the load and at the end.

The baseline recomputes the labels from scratch with a vectorized union-find (min-label hooking
and pointer jumping); to give every change's own time it must recompute once per change, so it
needs ``rate`` recomputes per second of updates (once per epoch is printed for reference).

ddflow absorbs ``--changes`` changes per E (one second is ``--rate`` changes); with fewer, the
milliseconds per second of updates are scaled from the changes measured (printed as such).

    .venv/bin/python benchmarks/bench_cc_window.py [--edges 100000 --epochs 100 --changes 200]

The issue's figure is ``--edges 1000000 --epochs 1000,10000 --changes 10000`` (hours with the
current engine); ``--changes 100 --epochs 100`` on 1M edges gives a scaled estimate.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench_reachability import ints, peak_rss_mb, rss_mb

from ddflow.operators import Dataflow
from ddflow.operators.library import connected_components


def power_law_edges(nodes: int, count: int, skew: float, seed: int = 42) -> np.ndarray:
    """``(count, 2)`` endpoints drawn from a Zipf law over shuffled node ids."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, nodes + 1) ** skew
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random((count, 2))), nodes - 1)
    return rng.permutation(nodes)[ranks]


def numpy_components(src: np.ndarray, dst: np.ndarray, nodes: int) -> np.ndarray:
    """Per node, the least node of its undirected component (isolated nodes label themselves)."""
    label = np.arange(nodes)
    while True:
        ls, ld = label[src], label[dst]
        low = np.minimum(ls, ld)
        new = label.copy()
        for at in (src, dst, ls, ld):  # hook both ends and both ends' labels to the lesser label
            np.minimum.at(new, at, low)
        while True:  # pointer jumping
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label
        label = new


class Components:
    """ddflow's connected components over the window, with its output accumulated from the capture."""

    def __init__(self, e: np.ndarray, edges: int, rate: float) -> None:
        self.e, self.edges, self.step_ns = e, edges, 1e9 / rate
        self.graph = list(map(tuple, e.tolist()))
        self.df = Dataflow()
        self.edges_in = self.df.new_input("edges")
        self.probe = connected_components(self.edges_in.collection).capture(history=False)
        self.current: dict = {}
        self.done = 0

    def _absorb(self) -> None:
        current = self.current
        for record, _time, diff in self.probe.drain():
            c = current.get(record, 0) + diff
            if c:
                current[record] = c
            else:
                del current[record]

    def time_of(self, k: int) -> int:
        return 1 + int(k * self.step_ns)

    def load(self) -> float:
        started = time.perf_counter()
        for edge in self.graph[: self.edges]:
            self.edges_in.insert(edge, 0)
        self.edges_in.advance_to(1)
        self.df.run()
        self._absorb()
        return time.perf_counter() - started

    def slide(self, changes: int, epoch: int) -> tuple[float, float]:
        """Absorb the next ``changes`` changes, an epoch every ``epoch``; (wall, CPU) seconds."""
        graph, edges, update = self.graph, self.edges, self.edges_in.update
        started, cpu = time.perf_counter(), time.process_time()
        k, stop = self.done, self.done + changes
        while k < stop:
            end = min(k + epoch, stop)
            for j in range(k, end):
                t = self.time_of(j)
                update(graph[j], t, -1)
                update(graph[edges + j], t, 1)
            self.edges_in.advance_to(self.time_of(end))
            self.df.run()
            self._absorb()
            k = end
        self.done = stop
        return time.perf_counter() - started, time.process_time() - cpu

    def check(self, nodes: int) -> int:
        w = self.e[self.done : self.done + self.edges]
        label = numpy_components(w[:, 0], w[:, 1], nodes)
        ends = np.unique(w)
        want = dict(zip(ends.tolist(), label[ends].tolist()))
        got = {}
        for (node, lab), c in self.current.items():
            if c != 1 or node in got:
                raise SystemExit(f"after {self.done} changes: node {node} has label {lab} with count {c}")
            got[node] = lab
        if got != want:
            bad = [(n, got.get(n), want[n]) for n in want if got.get(n) != want[n]][:5]
            raise SystemExit(f"after {self.done} changes: labels differ from the baseline's "
                             f"({len(got)} vs {len(want)} nodes), e.g. (node, got, want) {bad}")
        return len(set(want.values()))


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=None, help="default: as many as edges")
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of the endpoints")
    parser.add_argument("--rate", type=float, default=10_000, help="updates per second of event time")
    parser.add_argument("--epochs", type=ints, default=(100,), help="changes per progress epoch")
    parser.add_argument("--changes", type=int, default=200, help="changes absorbed per E")
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    n, m, rate = args.nodes or args.edges, args.edges, args.rate
    per_second = int(rate)
    per_e = {ep: max(args.changes, ep) for ep in args.epochs}
    total = sum(per_e.values())
    e = power_law_edges(n, m + total, args.skew)
    degree = np.bincount(e[:m].ravel(), minlength=n)
    print(f"connected components, sliding window: {m:,} edges over {n:,} nodes (Zipf {args.skew}; "
          f"{int((degree > 0).sum()):,} nodes in use, max degree {int(degree.max()):,}), "
          f"{per_second:,} updates/s, each its own time")

    started = time.perf_counter()
    src, dst = e[:m, 0].copy(), e[:m, 1].copy()
    label = numpy_components(src, dst, n)
    initial = time.perf_counter() - started
    ends = np.unique(e[:m])
    recomputes, started, cpu = 0, time.perf_counter(), time.process_time()
    while recomputes < 3 or (time.perf_counter() - started < args.baseline_seconds and recomputes < total):
        slot = recomputes % m
        src[slot], dst[slot] = e[m + recomputes]
        numpy_components(src, dst, n)
        recomputes += 1
    per = (time.perf_counter() - started) / recomputes
    per_cpu = (time.process_time() - cpu) / recomputes
    print(f"baseline (numpy union-find recompute): initial {initial:.2f} s, "
          f"{len(np.unique(label[ends])):,} components; {per * 1e3:.0f} ms per recompute ({per_cpu * 1e3:.0f} ms "
          f"CPU) over {recomputes} -> {per * per_second * 1e3:,.0f} ms per second of updates at full resolution",
          flush=True)

    run = Components(e, m, rate)
    loaded = run.load()
    comps = run.check(n)
    print(f"ddflow initial computation: {loaded:.1f} s, {comps:,} components (checked), "
          f"RSS {rss_mb():,.0f} MB", flush=True)
    print("ms to absorb one second of updates (scaled from the changes measured when fewer):")
    print(f"{'E':>7} {'changes':>8} {'ms wall':>10} {'ms CPU':>10} {'x numpy full-res':>17} {'x by CPU':>9} "
          f"{'numpy once/epoch':>17}")
    for ep, changes in per_e.items():
        wall, cpu = run.slide(changes, ep)
        scale = per_second / changes * 1e3
        numpy_epochs = per * (per_second / ep) * 1e3
        print(f"{ep:>7,} {changes:>8,} {wall * scale:>10,.0f} {cpu * scale:>10,.0f} "
              f"{per / (wall / changes):>17.3g} {per_cpu / (cpu / changes):>9.3g} {numpy_epochs:>14,.0f} ms",
              flush=True)
    comps = run.check(n)
    print(f"after {run.done:,} changes: {comps:,} components (checked); RSS {rss_mb():,.0f} MB, "
          f"peak RSS {peak_rss_mb():,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
