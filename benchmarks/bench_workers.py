"""Benchmark: the sliding-window reachability of ``bench_reachability`` run by 1, 2 and 3 in-process
workers, against one plain Dataflow in the same run.

In-process workers are threads of one Python process: they share one interpreter lock, so this
measures what the exchange costs (routing by key hash, values instead of ids across workers, one
agreement per loop round), not a speed-up; a speed-up needs workers in separate processes. Printed
per configuration: changes/s, the exchange steps per epoch, the mean wall time a worker waits in one
exchange step for the others (the per-round exchange latency), and the updates that crossed workers.
Every configuration's final output is checked against the plain Dataflow's. Workers in separate
processes over the mesh: ``bench_workers_mesh.py``.

With ``--daemon`` it runs the dataflows through the daemon instead: ``ddflow run`` processes with
``[workers] count`` = each of ``--workers`` (default 1, 2 and 4; one process per worker, exchanging over the mesh at its default
``ipc://`` addresses) over an embedded broker, on two
workloads written to a 4-partition input topic before the daemons start (a backlog): count-per-page
(``--updates`` views ``(user, page)``, default 1,000,000, 1 us apart, a marker every 1 ms, 1 ms
epochs) and the same sliding-window reachability (``--changes`` changes, default 20,000, at
E = ``--epoch``, default 10,000 per epoch). Per run: updates (changes) per second from the moment every
worker is open to the moment every worker's progress marker reaching the end is committed on the
result topic (watched by a consumer that decodes only the markers; the results are read and checked
after, untimed, so the benchmark's own Python decoding competes with no worker), the ratio to the
first worker count's run of the same invocation, each process's CPU seconds and the broker's (a broker busy the whole time bounds the run), and with several workers the exchange
steps, the mean and p99 wait per step (the per-round exchange latency) and the updates that crossed
workers, from the workers' logs. Results are checked: the counts per page against a count of the
input, reachability against the first run.

    .venv/bin/python benchmarks/bench_workers.py [--nodes 1000 --edges 2000 --changes 1000 --epoch 100]
    .venv/bin/python benchmarks/bench_workers.py --daemon [--workers 1,2,4 --updates 1000000 --changes 20000 --epoch 10000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_reachability import workload

from ddflow.operators import Dataflow
from ddflow.operators.library import reachability
from ddflow.operators.nodes.exchange import Exchange
from ddflow.operators.workers import Workers


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--edges", type=int, default=2000)
    p.add_argument("--roots", type=int, default=10)
    p.add_argument("--changes", type=int, default=None, help="changes (default 1,000; --daemon: 20,000)")
    p.add_argument("--epoch", type=int, default=None, help="changes per epoch, E (default 100; --daemon: 10,000)")
    p.add_argument("--workers", default=None,
                   help="worker counts: in-process besides the plain Dataflow (default 1,2,3); --daemon: "
                        "worker processes (default 1,2,4), the first the baseline of the ratios")
    p.add_argument("--daemon", action="store_true", help="through ddflow run: 1 process, then 2 (see above)")
    p.add_argument("--updates", type=int, default=1_000_000, help="--daemon: count-per-page views")
    p.add_argument("--skip", default="", help="--daemon: skip 'count' or 'reach'")
    p.add_argument("--threads", action="store_true",
                   help="--daemon: print each worker's busiest threads and their CPU (Python's threads carry the "
                        "process's name, the Kafka client's and ZeroMQ's their own)")
    p.add_argument("--max-updates", type=int, default=None,
                   help="--daemon: epoch.max_updates (a backlog's epochs hold at most this many updates; "
                        "default the daemon's)")
    return p


def build(df: Dataflow):
    roots, edges = df.new_input("roots"), df.new_input("edges")
    return reachability(roots.collection, edges.collection).capture(history=False)


def run(count: int | None, graph: np.ndarray, args) -> tuple[float, dict, list, int]:
    """(seconds of the changes, the final output, the exchange nodes, epochs)."""
    if count is None:
        df = Dataflow()
        probe = build(df)
        roots, edges, runner, captures, dataflows = df.inputs["roots"], df.inputs["edges"], df, [probe], [df]
    else:
        runner = Workers(count, build)
        roots, edges = runner.input("roots"), runner.input("edges")
        captures, dataflows = runner.outputs, runner.dataflows
    m, c = args.edges, args.changes
    for r in range(args.roots):
        roots.insert(r, 0)
    edges.update_many([tuple(e) for e in graph[:m].tolist()], np.zeros(m, dtype=np.int64), np.ones(m, dtype=np.int64))
    roots.advance_to(1)
    edges.advance_to(1)
    runner.run()
    exchanges = [n for df in dataflows for n in df._all_nodes() if isinstance(n, Exchange)]
    for n in exchanges:
        n.seq_start, n.wait_start = n.seq, n.wait_seconds
    started = time.perf_counter()
    epochs = 0
    for k in range(c):
        edges.remove(tuple(graph[k].tolist()), 1 + k)
        edges.insert(tuple(graph[m + k].tolist()), 1 + k)
        if (k + 1) % args.epoch == 0 or k == c - 1:
            roots.advance_to(2 + k)
            edges.advance_to(2 + k)
            runner.run()
            epochs += 1
    seconds = time.perf_counter() - started
    final: dict = {}
    for probe in captures:
        for record, _t, diff in probe.drain():
            final[record] = final.get(record, 0) + diff
    return seconds, final, exchanges, epochs


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    if args.daemon:
        from bench_workers_daemon import daemon_mode

        args.changes = 20_000 if args.changes is None else args.changes
        args.epoch = 10_000 if args.epoch is None else args.epoch
        args.workers = "1,2,4" if args.workers is None else args.workers
        daemon_mode(args)
        return
    args.changes = 1000 if args.changes is None else args.changes
    args.epoch = 100 if args.epoch is None else args.epoch
    args.workers = "1,2,3" if args.workers is None else args.workers
    graph = workload(args.nodes, args.edges, args.changes)
    print(f"reachability {args.nodes} nodes / {args.edges} edges / {args.roots} roots, {args.changes} changes, "
          f"E={args.epoch}")
    base_seconds, base, _, _ = run(None, graph, args)
    print(f"  one Dataflow:  {args.changes / base_seconds:9.0f} changes/s")
    compare(args, graph, base, base_seconds)


def compare(args, graph: np.ndarray, base: dict, base_seconds: float) -> None:
    for count in [int(w) for w in args.workers.split(",") if w]:
        seconds, final, exchanges, epochs = run(count, graph, args)
        if {r: d for r, d in final.items() if d} != {r: d for r, d in base.items() if d}:
            raise SystemExit(f"{count} workers: the output differs from the plain Dataflow's")
        steps = sum(n.seq - n.seq_start for n in exchanges) / count
        waited = sum(n.wait_seconds - n.wait_start for n in exchanges) / count
        crossed = sum(n.received for n in exchanges)
        print(f"  {count} worker(s):   {args.changes / seconds:9.0f} changes/s (ratio {base_seconds / seconds:.2f}); "
              f"{steps / epochs:.0f} exchange steps per epoch per worker, mean wait "
              f"{1e6 * waited / max(steps, 1):.0f} us per step; {crossed} updates crossed workers")


if __name__ == "__main__":
    main()
