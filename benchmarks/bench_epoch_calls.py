"""Python calls per single-change epoch: what the engine's control plane costs at one change.

The 1k-node/2k-edge sliding-window reachability (``bench_reachability``'s workload and dataflow)
is loaded, warmed up with ``--warm`` single-change epochs, then each executor runs ``--epochs``
more single-change epochs twice: once timed (CPU and wall p50/p99 per epoch), once under cProfile,
which counts every Python-level call (functions, methods, builtins) per epoch, and once more under a
profile hook that charges each call to the operator whose step made it (by kind: ``Reduce``,
``Arrange``, ``Join``, ...; ``Loop`` is the loop's own round bookkeeping, ``outside`` what runs
outside any operator step: the input sessions, the run's frontier). Both executors run
the same changes from the same state in the same process, the reference (``nodes``) first, so the
ratios are same-run figures; the output is checked against a BFS after each. Then each runs
``--rate-changes`` more changes at each ``--rates`` E (changes per epoch) and prints changes per CPU
second.

    .venv/bin/python benchmarks/bench_epoch_calls.py [--epochs 200 --warm 300 --top 15 --rates 10,1000]
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench_reachability import Reachability, workload
from ddflow.operators import Dataflow
from ddflow.operators.executor import PlanExecutor
from ddflow.operators.graph import Scope
from ddflow.operators.tuning import EngineConfig

ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def build(executor: str, e: np.ndarray, nodes: int, edges: int, roots: int) -> Reachability:
    r = Reachability.__new__(Reachability)
    original = Dataflow.__init__
    Dataflow.__init__ = lambda self, *, config=None: original(self, config=EngineConfig(executor=executor))
    try:
        r.__init__(e, nodes, edges, roots)
    finally:
        Dataflow.__init__ = original
    return r


_PASSES = (PlanExecutor._pass.__code__, Scope.step.__code__)  # the frames whose ``node`` is being stepped


def by_kind(r: Reachability, epochs: int) -> Counter:
    """Python calls per epoch of ``epochs`` single-change epochs, by the kind of the operator whose step
    made them (the innermost pass's ``node``), ``outside`` for calls outside every pass."""
    counts: Counter = Counter()

    def kind(frame) -> str:
        while frame is not None:
            if frame.f_code in _PASSES:
                node = frame.f_locals.get("node")
                return "outside" if node is None else type(node).__name__
            frame = frame.f_back
        return "outside"

    def hook(frame, event, arg) -> None:
        if event == "call":  # a compiled kernel's call reports a frame of its own, without f_back
            counts[kind(frame.f_back if frame.f_back is not None else sys._getframe(1))] += 1
        elif event == "c_call":
            counts[kind(frame)] += 1

    sys.setprofile(hook)
    try:
        r.slide(epochs, 1)
    finally:
        sys.setprofile(None)
    return Counter({k: c / epochs for k, c in counts.items()})


def measure(executor: str, e, args) -> dict:
    r = build(executor, e, args.nodes, args.edges, args.roots)
    r.load()
    r.slide(args.warm, 1)
    before = r.loop_rounds()
    timed = r.slide(args.epochs, 1)
    per_round = (r.loop_rounds() - before) / args.epochs
    profile = cProfile.Profile()
    profile.enable()
    r.slide(args.epochs, 1)
    profile.disable()
    kinds = by_kind(r, args.epochs)
    r.check()
    rates = {}
    for epoch in args.rates:
        phase = r.slide(args.rate_changes, epoch)
        rates[epoch] = args.rate_changes / phase.cpu
    r.check()
    by_function: Counter = Counter()  # from the profiler's entries: pstats would key every dataclass's
    for entry in profile.getstats():  # generated __init__ as one function ('<string>:2') and keep one
        code = entry.code
        name = (f"{code.co_filename.replace(ROOT, '')}:{code.co_firstlineno}({code.co_name})"
                if hasattr(code, "co_filename") else str(code))
        by_function[name] += entry.callcount / args.epochs
    cpu = np.asarray(timed.epoch_cpu) * 1e3
    wall = np.asarray(timed.latencies) * 1e3
    return {"calls": sum(by_function.values()), "rounds": per_round, "top": by_function.most_common(args.top),
            "kinds": kinds.most_common(),
            "rates": rates, "cpu_p50": np.percentile(cpu, 50), "cpu_p99": np.percentile(cpu, 99),
            "wall_p50": np.percentile(wall, 50), "wall_p99": np.percentile(wall, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--edges", type=int, default=2_000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=200, help="single-change epochs measured (each way)")
    parser.add_argument("--warm", type=int, default=300, help="single-change epochs before measuring")
    parser.add_argument("--top", type=int, default=15, help="functions listed by calls per epoch")
    parser.add_argument("--executors", default="nodes,plan")
    parser.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",") if x], default=[10, 1_000],
                        help="changes per epoch of the throughput runs (empty: none)")
    parser.add_argument("--rate-changes", type=int, default=2_000, help="changes of each throughput run")
    args = parser.parse_args()
    e = workload(args.nodes, args.edges, args.warm + 3 * args.epochs + args.rate_changes * len(args.rates))
    results = {}
    for executor in args.executors.split(","):
        started = time.perf_counter()
        results[executor] = m = measure(executor, e, args)
        print(f"{executor:>5s}: {m['calls']:7,.0f} Python calls per single-change epoch, {m['rounds']:.1f} loop "
              f"rounds; epoch CPU p50 {m['cpu_p50']:.2f} ms p99 {m['cpu_p99']:.2f} ms, wall p50 "
              f"{m['wall_p50']:.2f} ms p99 {m['wall_p99']:.2f} ms ({time.perf_counter() - started:.0f} s)")
        print("        by operator: " + ", ".join(f"{kind} {calls:,.0f}" for kind, calls in m["kinds"]))
        if m["rates"]:
            print("        " + ", ".join(f"E={e:,}: {rate:,.0f} changes per CPU s" for e, rate in m["rates"].items()))
        for name, calls in m["top"]:
            print(f"        {calls:7.1f}  {name}")
    if "nodes" in results:
        base = results["nodes"]
        for executor, m in results.items():
            if executor != "nodes":
                rates = "".join(f", E={e:,} x{rate / base['rates'][e]:.2f}" for e, rate in m["rates"].items())
                print(f"{executor} / nodes: calls x{m['calls'] / base['calls']:.2f}, CPU p50 "
                      f"x{m['cpu_p50'] / base['cpu_p50']:.2f}, p99 x{m['cpu_p99'] / base['cpu_p99']:.2f}{rates}")


if __name__ == "__main__":
    main()
