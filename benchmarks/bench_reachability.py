"""Benchmark: sliding-window reachability at full resolution (the 2016 roadmap), against a stateless
numpy recompute measured in the same run.

Workload (`ddflow.operators.testing.window_edges`): ``e = numpy.random.default_rng(42).integers(0, N, (M + C, 2))``;
edges ``0..M-1`` form the initial graph (at time 0); change ``k`` removes edge ``k`` and adds edge
``M + k`` at its own nanosecond time ``1 + k``; roots are ``0..R-1``; duplicate edges count as a
multiset. ddflow runs ``ddflow.operators.library.reachability`` and closes the progress epoch every
``E`` changes (``advance_to`` + ``run``), in a closed loop: the next epoch is fed when the previous
one's output is complete. A change's latency is the wall time from feeding it to the end of the
``run()`` that completes its epoch.

The baseline recomputes the reachable ``(root, node)`` pairs from scratch with a vectorized numpy
BFS. To give outputs at the same resolution (every change's own time) it must recompute after every
change; that rate is the denominator of the printed ratios (once per epoch would give only the
epochs' last times, and is printed for reference). ddflow's final output is checked against the
baseline's BFS; a mismatch fails the benchmark.

    .venv/bin/python benchmarks/bench_reachability.py \
        [--epochs 10,100,1000,10000 --changes 1000 --latency-e 100 --milestones 1000,10000]

The roadmap's full latency figure is ``--milestones 1000,10000,100000,1000000`` (hours at E=100 with
the current engine). With ``--plot PATH`` the latency CDF is saved as a PNG there.

Sustained latency (the roadmap's benchmark 1 at one change per epoch): ``--sustained`` runs only that,
E=1 for 10,000 changes (about a minute), and compares the latencies of the first ``--window`` changes
with the last ones, and those with the same last changes on a new dataflow loaded with the window
before them (what the window's graph costs, apart from the engine's age); ``--sustained 1000000``
gives the roadmap's figure (changes 999,000-1,000,000 against the first 1,000; about half an hour
on the development machine). The window's graph drifts as edges come and go (a deeper graph costs
more loop rounds); ``--repeat`` makes the changes repeat after all but the last ``--window`` of them,
so that those meet exactly the windows the first ones met and only the engine's age differs:

    .venv/bin/python benchmarks/bench_reachability.py --sustained [1000000] [--repeat]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ddflow.operators import Dataflow
from ddflow.operators.library import reachability
from ddflow.operators.testing import window_edges


# -- workload and baseline ------------------------------------------------------------------------
def workload(nodes: int, edges: int, changes: int, seed: int = 42) -> np.ndarray:
    """The ``(edges + changes, 2)`` edge list of the sliding window."""
    return window_edges(nodes, edges, changes, seed=seed)


def repeated(e: np.ndarray, period: int) -> np.ndarray:
    """The edge list ``e`` with edge ``j`` replaced by edge ``j % period`` (``period`` at least the
    window's edges): change ``k + period`` removes and adds the edges change ``k`` did, on the same
    window."""
    return e[np.arange(len(e)) % period]


def numpy_reach(src: np.ndarray, dst: np.ndarray, nodes: int, roots: np.ndarray) -> np.ndarray:
    """Level-synchronous BFS from every root at once over a CSR index of the edges.

    Returns the ``(roots, nodes)`` bool matrix of reached nodes. A frontier is a vector of codes
    ``root_row * nodes + node``; a node reached twice in one level is expanded twice (cheaper here
    than sorting the frontier to remove duplicates)."""
    order = np.argsort(src, kind="stable")
    targets = dst[order]
    offsets = np.searchsorted(src[order], np.arange(nodes + 1))
    seen = np.zeros(len(roots) * nodes, dtype=bool)
    front = np.arange(len(roots)) * nodes + roots
    seen[front] = True
    while len(front):
        rows, at = np.divmod(front, nodes)
        starts = offsets[at]
        degree = offsets[at + 1] - starts
        total = int(degree.sum())
        if total == 0:
            break
        ends = np.cumsum(degree)
        edge = np.arange(total) + np.repeat(starts - ends + degree, degree)
        code = np.repeat(rows * nodes, degree) + targets[edge]
        front = code[~seen[code]]
        seen[front] = True
    return seen.reshape(len(roots), nodes)


@dataclass
class Baseline:
    seconds_per_recompute: float  # wall
    cpu_per_recompute: float
    changes: int
    initial_pairs: int

    @property
    def full_resolution_rate(self) -> float:
        return 1.0 / self.seconds_per_recompute


def measure_baseline(e: np.ndarray, nodes: int, edges: int, roots: int, *, budget: float,
                     max_changes: int) -> Baseline:
    """Slide the window one change at a time and recompute after each, for about ``budget`` seconds."""
    src, dst = e[:edges, 0].copy(), e[:edges, 1].copy()
    root_ids = np.arange(roots)
    initial = int(numpy_reach(src, dst, nodes, root_ids).sum())
    started, cpu = time.perf_counter(), time.process_time()
    k = 0
    while k < max_changes and (k < 3 or time.perf_counter() - started < budget):
        slot = k % edges  # the oldest edge, k, sits in slot k mod M
        src[slot], dst[slot] = e[edges + k]
        numpy_reach(src, dst, nodes, root_ids)
        k += 1
    return Baseline((time.perf_counter() - started) / k, (time.process_time() - cpu) / k, k, initial)


def window_at(e: np.ndarray, edges: int, changes: int) -> tuple[np.ndarray, np.ndarray]:
    """The window's edges after ``changes`` changes."""
    w = e[changes : changes + edges]
    return w[:, 0].copy(), w[:, 1].copy()


# -- ddflow ---------------------------------------------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Phase:
    """Changes ``first .. first + changes - 1`` fed with an epoch every ``epoch`` changes."""

    epoch: int
    first: int
    changes: int
    seconds: float
    cpu: float  # process CPU seconds
    latencies: np.ndarray  # per change, wall seconds
    epoch_cpu: np.ndarray  # per change, the CPU seconds of its epoch (feed and run)
    rounds: np.ndarray  # per change, the loop rounds its epoch ran
    rss: dict[int, float] = field(default_factory=dict)  # MB after a number of changes (absolute)

    @property
    def rate(self) -> float:
        return self.changes / self.seconds


class Reachability:
    """One ddflow dataflow over the sliding window: ``load()`` the initial graph, then ``slide()``.

    The graph stays a numpy array: the initial edges are fed as one int column pair
    (``update_many``), each change as two ``update`` calls of its edge tuples, and the output is
    drained as columns (``drain_columns``) and accumulated as packed ``root * nodes + node`` codes, so
    the process's time and memory are ddflow's rather than the benchmark's own Python objects."""

    def __init__(self, e: np.ndarray, nodes: int, edges: int, roots: int) -> None:
        self.e, self.nodes, self.edges, self.roots = e, nodes, edges, roots
        self.df = Dataflow()
        self.roots_in, self.edges_in = self.df.new_input("roots"), self.df.new_input("edges")
        self.probe = reachability(self.roots_in.collection, self.edges_in.collection).capture(history=False)
        self._loops = [n for n in self.df._all_nodes() if type(n).__name__ == "Loop"]  # (the graph is fixed)
        self.codes = np.empty(0, dtype=np.int64)  # the output accumulated so far: codes and counts
        self.counts = np.empty(0, dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []  # drained, not yet folded in
        self.pending_rows = 0
        self.done = 0  # changes applied so far

    def _absorb(self) -> None:
        records, _times, diffs = self.probe.drain_columns()
        if not len(diffs):
            return
        if not isinstance(records, np.ndarray):  # not int pairs: never for this dataflow, but exact
            records = np.asarray(records, dtype=np.int64).reshape(-1, 2)
        self.pending.append((records[:, 0] * self.nodes + records[:, 1], diffs))
        self.pending_rows += len(diffs)
        if self.pending_rows >= max(1 << 24, len(self.codes)) or len(self.pending) >= 4096:
            self._fold()  # bounded (rows, and drains: a million single-change drains would hold ~350 MB)

    def _fold(self) -> None:
        """Add the pending drains to the accumulated output (amortized: once they are as many)."""
        if not self.pending:
            return
        codes = np.concatenate([self.codes, *(c for c, _ in self.pending)])
        counts = np.concatenate([self.counts, *(d for _, d in self.pending)])
        self.pending, self.pending_rows = [], 0
        order = np.argsort(codes, kind="stable")
        codes, counts = codes[order], counts[order]
        starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]])) if len(codes) else np.empty(0, int)
        self.codes, self.counts = codes[starts], np.add.reduceat(counts, starts) if len(codes) else counts
        live = self.counts != 0
        self.codes, self.counts = self.codes[live], self.counts[live]

    def load(self) -> float:
        """The initial graph at time 0; returns the seconds to its complete output."""
        started = time.perf_counter()
        m = self.edges
        self.roots_in.update_many(np.arange(self.roots), np.zeros(self.roots, np.int64), np.ones(self.roots, np.int64))
        self.roots_in.close()
        self.edges_in.update_many(self.e[:m], np.zeros(m, np.int64), np.ones(m, np.int64))
        self.edges_in.advance_to(1)
        self.df.run()
        seconds = time.perf_counter() - started
        self._absorb()
        return seconds

    def slide(self, changes: int, epoch: int, marks: tuple[int, ...] = (), progress: bool = False) -> Phase:
        """The next ``changes`` changes, change ``k`` at time ``1 + k``, an epoch every ``epoch``."""
        edges, update, clock = self.edges, self.edges_in.update, time.perf_counter
        first = self.done
        stop = first + changes
        # the phase's edges as tuples, made before timing (change k: old edge k, new edge M + k)
        old = list(map(tuple, self.e[first:stop].tolist()))
        new = list(map(tuple, self.e[edges + first : edges + stop].tolist()))
        latencies, epoch_cpu, rounds = np.empty(changes), np.empty(changes), np.empty(changes)
        rss: dict[int, float] = {}
        started, cpu = clock(), time.process_time()
        k = first
        while k < stop:
            end = min(k + epoch, stop)
            before = self.loop_rounds()
            fed, cpu_start = np.empty(end - k), time.process_time()
            for j in range(k, end):
                fed[j - k] = clock()
                update(old[j - first], 1 + j, -1)
                update(new[j - first], 1 + j, 1)
            self.edges_in.advance_to(1 + end)
            self.df.run()
            latencies[k - first : end - first] = clock() - fed
            epoch_cpu[k - first : end - first] = time.process_time() - cpu_start
            rounds[k - first : end - first] = self.loop_rounds() - before
            self._absorb()
            k = end
            if k in marks or k == stop:
                rss[k] = rss_mb()
                if progress:
                    print(f"  .. E={epoch}: {k:,} changes, {(k - first) / (clock() - started):,.0f}/s, "
                          f"RSS {rss[k]:,.0f} MB", file=sys.stderr, flush=True)
        self.done = stop
        return Phase(epoch, first, changes, clock() - started, time.process_time() - cpu, latencies, epoch_cpu,
                     rounds, rss)

    def loop_rounds(self) -> int:
        """The loop rounds this dataflow has run so far (how far its changes travelled): a sum over
        the loop nodes found when the dataflow was built, so that counting adds a few Python calls
        per epoch to what ``bench_epoch_calls.py`` counts, not a walk over every node."""
        return sum(n.rounds for n in self._loops)

    def check(self) -> int:
        """Compare the output now with a BFS of the window; exits on a mismatch. Returns the pair count."""
        self._fold()
        if np.any(self.counts != 1):
            bad = [(divmod(int(c), self.nodes), int(n)) for c, n in zip(self.codes, self.counts) if n != 1][:5]
            raise SystemExit(f"after {self.done} changes: output multiplicities other than 1: {bad}")
        src, dst = window_at(self.e, self.edges, self.done)
        root_ids = np.arange(self.roots)
        r, n = np.nonzero(numpy_reach(src, dst, self.nodes, root_ids))
        want = np.sort(root_ids[r] * self.nodes + n)
        if not np.array_equal(self.codes, want):
            extra, missing = np.setdiff1d(self.codes, want), np.setdiff1d(want, self.codes)
            raise SystemExit(f"after {self.done} changes: ddflow's output differs from BFS: "
                             f"{len(extra)} extra, {len(missing)} missing")
        return len(self.codes)


# -- reporting ------------------------------------------------------------------------------------
def summary(latencies: np.ndarray) -> dict[str, float]:
    ms = latencies * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"p50": p50, "p90": p90, "p99": p99, "max": ms.max()}


def latency_row(label: str, phase: Phase, lo: int, hi: int, rss: str) -> str:
    """A row of the latency table: the wall and epoch CPU percentiles of the phase's changes ``lo ..
    hi - 1`` (indexes into it), ``rss`` as given, the loop rounds per epoch (how far changes travel in
    the window's graph) and the CPU per round."""
    s, c = summary(phase.latencies[lo:hi]), summary(phase.epoch_cpu[lo:hi])
    per_epoch = slice(lo, hi, phase.epoch)  # (one value per epoch: each is repeated for its changes)
    rounds, cpu = phase.rounds[per_epoch], phase.epoch_cpu[per_epoch]
    return (f"{label:>9} {s['p50']:>8.1f} {s['p90']:>8.1f} {s['p99']:>8.1f} {s['max']:>8.1f} {c['p50']:>8.1f} "
            f"{c['p99']:>8.1f} {rss} {rounds.mean():>7.1f} {cpu.sum() / max(rounds.sum(), 1) * 1e6:>8.0f} us")


def plot_cdf(windows: dict[int, np.ndarray], cpu: dict[int, np.ndarray], title: str, path: Path) -> None:
    """Two panels of latency CDFs per milestone: wall time (what a user waits, load included) and the
    CPU time of the change's epoch (what the engine spent, which other jobs on the machine do not
    inflate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, data, what in ((axes[0], windows, "wall latency (ms): change fed -> its epoch's output complete"),
                           (axes[1], cpu, "CPU time of the change's epoch (ms)")):
        for mark, lat in data.items():
            xs = np.sort(lat * 1e3)
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=f"after {mark:,} changes")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(what, fontsize=9)
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("fraction of changes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x.replace("_", "")) for x in text.split(",") if x)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--edges", type=int, default=2_000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--epochs", type=ints, default=(10, 100, 1_000, 10_000),
                        help="progress epoch sizes E (changes per advance_to)")
    parser.add_argument("--changes", type=int, default=1_000,
                        help="changes per throughput run (at least one epoch of E)")
    parser.add_argument("--latency-e", type=int, default=100, help="E of the latency run (0: none)")
    parser.add_argument("--milestones", type=ints, default=(1_000, 10_000),
                        help="latency distributions after these many changes")
    parser.add_argument("--window", type=int, default=1_000, help="latencies per distribution")
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    parser.add_argument("--sustained", type=int, nargs="?", const=10_000, default=0, metavar="CHANGES",
                        help="only the sustained-latency run: E=1 for CHANGES changes (10,000 when no number), "
                             "the first --window changes against the last")
    parser.add_argument("--repeat", action="store_true",
                        help="with --sustained: the changes repeat after all but --window of them, so that the "
                             "last window's changes meet the first window's graphs again (the engine's age alone)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="save the latency CDF as a PNG here (the docs' figure: docs/img/reachability_latency_cdf.png)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.sustained:
        if args.sustained < 2 * args.window:
            raise SystemExit(f"--sustained {args.sustained}: at least twice --window ({args.window}) changes")
        args.epochs, args.latency_e = (), 1
        args.milestones = (args.window, args.sustained)
    n, m, r = args.nodes, args.edges, args.roots
    longest = max([*args.milestones, *(max(args.changes, ep) for ep in args.epochs)])
    e = workload(n, m, longest)
    print(f"sliding-window reachability: {n:,} nodes, {m:,} edges, {r} roots, seed 42, "
          f"each change its own time")
    if args.repeat:
        if not args.sustained or args.sustained - args.window < m:
            raise SystemExit("--repeat: with --sustained, at least --edges + --window changes")
        e = repeated(e, args.sustained - args.window)
        print(f"the changes repeat every {args.sustained - args.window:,}: changes {args.sustained - args.window:,}.."
              f"{args.sustained - 1:,} meet the same windows as changes 0..{args.window - 1:,}")

    base = measure_baseline(e, n, m, r, budget=args.baseline_seconds, max_changes=longest)
    print(f"baseline (numpy BFS recompute): {base.initial_pairs:,} reachable pairs initially; "
          f"{base.seconds_per_recompute * 1e3:.2f} ms per recompute over {base.changes:,} changes -> "
          f"{base.full_resolution_rate:,.0f} changes/s at full resolution "
          f"({1 / base.cpu_per_recompute:,.0f} per CPU s)")

    phases: dict[int, Phase] = {}
    latency: Phase | None = None
    initial_seconds, initial_pairs = 0.0, 0
    for ep in sorted({*args.epochs, *((args.latency_e,) if args.latency_e else ())}):
        changes = max(args.changes, ep) if ep in args.epochs else 0
        marks: tuple[int, ...] = ()
        if ep == args.latency_e:
            changes, marks = max(changes, *args.milestones), args.milestones
        run = Reachability(e, n, m, r)  # a fresh dataflow per E
        initial_seconds = run.load()
        initial_pairs = run.check()
        phase = run.slide(changes, ep, marks, progress=True)
        run.check()
        if ep in args.epochs:
            phases[ep] = phase
        if ep == args.latency_e:
            latency = phase
        del run

    print(f"ddflow initial computation: {initial_seconds:.2f} s, {initial_pairs:,} pairs (checked by BFS)")
    if phases:
        print(f"{'E':>7} {'changes':>9} {'ddflow changes/s':>17} {'per CPU s':>10} {'x numpy full-res':>17} "
              f"{'numpy once/epoch':>17}")
    for ep, phase in phases.items():
        coarse = ep / base.seconds_per_recompute
        print(f"{ep:>7,} {phase.changes:>9,} {phase.rate:>17,.0f} {phase.changes / phase.cpu:>10,.0f} "
              f"{phase.rate / base.full_resolution_rate:>17.2f} {coarse:>17,.0f}")

    if latency is not None:
        lat = latency
        print(f"latency at E={lat.epoch} (closed loop; last {args.window:,} changes before each mark; wall "
              f"time, and the CPU time of the change's epoch, which a loaded machine does not inflate):")
        print(f"{'after':>9} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU p50':>8} "
              f"{'CPU p99':>8} {'RSS MB':>8} {'rounds':>7} {'CPU/round':>10}")
        windows, cpu_windows = {}, {}
        for mark in args.milestones:
            window = lat.latencies[max(0, mark - args.window) : mark]
            windows[mark] = window
            cpu_windows[mark] = lat.epoch_cpu[max(0, mark - args.window) : mark]
            print(latency_row(f"{mark:,}", lat, max(0, mark - args.window), mark,
                              f"{lat.rss.get(mark, float('nan')):>8.0f}"))
        if args.sustained:  # the same last changes on a new dataflow: what the window costs, not the engine's age
            last = args.sustained - args.window
            fresh = Reachability(e[last:], n, m, r)  # the window before change ``last``, loaded at once
            fresh.load()
            phase = fresh.slide(args.window, 1)
            fresh.check()
            print(latency_row("new", phase, 0, args.window, f"{'':>8}")
                  + f"  (changes {last:,}..{args.sustained - 1:,} on a new dataflow loaded with the window before them)")
        if len(windows) > 1:
            lo, hi = min(windows), max(windows)
            a, b = summary(windows[lo]), summary(windows[hi])
            ca = summary(lat.epoch_cpu[max(0, lo - args.window) : lo])
            cb = summary(lat.epoch_cpu[max(0, hi - args.window) : hi])
            print(f"after {hi:,} vs after {lo:,}: wall p50 x{b['p50'] / a['p50']:.2f}, "
                  f"p99 x{b['p99'] / a['p99']:.2f}; CPU p50 x{cb['p50'] / ca['p50']:.2f}, "
                  f"p99 x{cb['p99'] / ca['p99']:.2f}")
        if args.plot is not None:
            plot_cdf(windows, cpu_windows,
                     f"reachability {n:,} nodes / {m:,} edges / {r} roots, E={lat.epoch}", args.plot)
            print(f"latency CDF saved to {args.plot}")
    print(f"peak RSS {peak_rss_mb():,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
