"""Per-node cost of the scheduler: a chain of operators that do no work, stepped one change per epoch.

Each epoch inserts one record into a chain of ``--nodes`` operators and runs the dataflow; the
baseline, measured in the same run, is the same loop over a chain of one operator, so the difference
divided by the extra nodes is what one more node costs per epoch (scheduling, buffers, frontier
checks). Two chains are measured: ``negate`` nodes (the record passes through every node) and
``filter(lambda x: False)`` after the first (the record stops at once: the rest have no work and should
cost nothing).

    .venv/bin/python benchmarks/bench_scheduler.py [--nodes 200] [--epochs 2000]
"""

from __future__ import annotations

import argparse
import time

from ddflow.operators import Dataflow


def chain(nodes: int, kind: str) -> tuple[Dataflow, object, object]:
    df = Dataflow()
    xs = df.new_input("xs")
    c = xs.collection
    for i in range(nodes):
        if kind == "negate":
            c = c.negate()
        else:
            c = c.filter(lambda x: False) if i == 0 else c.negate()
    return df, xs, c.capture()


def per_epoch(nodes: int, kind: str, epochs: int) -> tuple[float, object]:
    df, xs, probe = chain(nodes, kind)
    for t in range(50):  # warm-up: memos, code paths
        xs.insert(t, t)
        xs.advance_to(t + 1)
        df.run()
    start = time.perf_counter()
    for t in range(50, 50 + epochs):
        xs.insert(t, t)
        xs.advance_to(t + 1)
        df.run()
    return (time.perf_counter() - start) / epochs, probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=2000)
    args = parser.parse_args()
    for kind in ("negate", "idle"):
        base, _ = per_epoch(1, kind, args.epochs)
        full, probe = per_epoch(args.nodes, kind, args.epochs)
        sign = -1 if (kind == "negate" and args.nodes % 2) else 1
        want = {} if kind == "idle" else {x: sign for x in range(50 + args.epochs)}
        assert probe.at(49 + args.epochs) == want, "wrong result"
        per_node = (full - base) / (args.nodes - 1)
        print(f"{kind:6s} chain of {args.nodes}: {full * 1e6:8.1f} us/epoch, chain of 1: {base * 1e6:6.1f} us/epoch "
              f"-> {per_node * 1e6:5.2f} us per node per epoch ({full / base:.1f}x the one-node chain)")


if __name__ == "__main__":
    main()
