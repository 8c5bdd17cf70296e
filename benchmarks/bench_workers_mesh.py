"""Benchmark: the sliding-window reachability of ``bench_reachability`` run by 1, 2 and 4 worker
*processes* exchanging over the mesh (``ddflow.daemon.cluster.mesh``, ``ipc://`` sockets on this
host).

Each process feeds its share of the changes (change ``k`` goes to worker ``k % W``) and closes the
same epochs of ``E`` changes. Printed per configuration: changes/s from the first change to the
last epoch's end (slowest worker) and its ratio to the 1-worker mesh run, each worker's CPU
seconds, the mean and p99 wall time a worker waits in one exchange step (its ``receive``: the
per-round exchange latency, which includes waiting for a slower peer's compute), the exchange
steps and agreements per epoch (a loop agrees its first round apart, the later ones on its exchange
steps), and the bytes of update frames (records, times, diffs, new values) sent per update that
crossed workers. Every run's final output is checked against the 1-worker run's.

    .venv/bin/python benchmarks/bench_workers_mesh.py [--nodes 1000 --edges 2000 --changes 1000
        --epoch 100 --workers 1,2,4]
    .venv/bin/python benchmarks/bench_workers_mesh.py --rounds 2000   # the bare round trip

Ratios of changes/s say little on a machine with fewer cores than workers plus load; the wait per
step is the figure the mesh is about.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
from bench_reachability import workload


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--edges", type=int, default=2000)
    p.add_argument("--roots", type=int, default=10)
    p.add_argument("--changes", type=int, default=1000)
    p.add_argument("--epoch", type=int, default=100)
    p.add_argument("--workers", default="1,2,4", help="worker process counts over the mesh")
    p.add_argument("--rounds", type=int, default=0,
                   help="only N empty exchange steps between 2 processes (the bare round trip)")
    p.add_argument("--breakdown", action="store_true",
                   help="profile each worker's CPU (cProfile on process time) and print how much of it the "
                        "exchange took: the mesh transport's calls and the exchange operators' steps")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: run one worker process
    return p


def worker(spec: dict) -> None:
    """One worker process: build, feed its share, time the changes, print its figures as JSON."""
    from ddflow.operators.library import reachability
    from ddflow.operators.workers import worker_dataflow

    index, count = spec["index"], spec["count"]
    if spec.get("rounds"):
        return empty_steps(spec)
    transport = transport_of(spec)
    waits: list[float] = []
    receive = transport.receive

    def timed(*a):
        started = time.perf_counter()
        try:
            return receive(*a)
        finally:
            waits.append(time.perf_counter() - started)

    transport.receive = timed  # every exchange step's wait, for the mean and p99
    df = worker_dataflow(index, count, transport)
    roots, edges = df.new_input("roots"), df.new_input("edges")
    probe = reachability(roots.collection, edges.collection).capture(history=False)
    graph = workload(spec["nodes"], spec["edges"], spec["changes"])
    m, c, e = spec["edges"], spec["changes"], spec["epoch"]
    if index == 0:
        for r in range(spec["roots"]):
            roots.insert(r, 0)
    share = np.arange(m) % count == index
    edges.update_many([tuple(x) for x in graph[:m][share].tolist()], np.zeros(int(share.sum()), dtype=np.int64),
                      np.ones(int(share.sum()), dtype=np.int64))
    roots.advance_to(1)
    edges.advance_to(1)
    df.run()
    waits.clear()
    sent0, agreed0 = getattr(transport, "sent_bytes", 0), getattr(transport, "agreements", 0)
    profile = cProfile.Profile(time.process_time) if spec.get("breakdown") else None
    if profile is not None:
        profile.enable()
    cpu0, started, epochs = time.process_time(), time.perf_counter(), 0
    for k in range(c):
        if k % count == index:
            edges.remove(tuple(graph[k].tolist()), 1 + k)
            edges.insert(tuple(graph[m + k].tolist()), 1 + k)
        if (k + 1) % e == 0 or k == c - 1:
            roots.advance_to(2 + k)
            edges.advance_to(2 + k)
            df.run()
            epochs += 1
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    if profile is not None:
        profile.disable()
    from ddflow.operators.nodes.exchange import Exchange

    exchanges = [n for n in df._all_nodes() if isinstance(n, Exchange)]
    final: dict = {}
    for record, _t, diff in probe.drain():
        final[json.dumps(record)] = final.get(json.dumps(record), 0) + diff
    print(json.dumps({"seconds": seconds, "cpu": cpu, "waits": waits, "epochs": epochs,
                      "sent": sum(n.sent for n in exchanges),
                      "sent_bytes": getattr(transport, "sent_bytes", 0) - sent0,
                      "agreements": getattr(transport, "agreements", 0) - agreed0,
                      "breakdown": None if profile is None else breakdown(profile),
                      "final": {k: d for k, d in final.items() if d}}))
    close = getattr(transport, "close", None)
    if close:
        close()


def breakdown(profile: cProfile.Profile) -> dict[str, float]:
    """CPU seconds (the profile's timer is process time, so waiting costs nothing) of the whole run,
    of the mesh transport's entry points (send, mark, receive, gather: encoding, sockets, decoding)
    and of the exchange operators' steps (partitioning by owner, then handing batches to the
    transport: their transport calls are counted in both)."""
    stats = pstats.Stats(profile)  # .stats: (file, line, name) -> (calls, primitive, tottime, cumtime, callers)
    transport = exchange = 0.0
    for (file, _line, name), (_n, _p, _tot, cum, _callers) in stats.stats.items():
        if file.endswith(os.path.join("cluster", "mesh.py")) and name in ("send", "mark", "receive", "gather"):
            transport += cum
        elif file.endswith(os.path.join("nodes", "exchange.py")) and name == "step":
            exchange += cum
    return {"total": stats.total_tt, "transport": transport, "exchange_steps": exchange}


def transport_of(spec: dict):
    from ddflow.daemon.cluster.mesh import MeshTransport

    return MeshTransport(spec["addresses"], spec["index"], run=spec["run"], start_timeout=300)


def empty_steps(spec: dict) -> None:
    """``rounds`` exchange steps with nothing to send (a marker each way) and nothing to compute:
    the transport's own round trip."""
    from ddflow.operators.transport import ExchangeMarker

    transport, index = transport_of(spec), spec["index"]
    waits = []
    cpu0 = 0.0
    for seq in range(spec["rounds"] + 50):
        if seq == 50:  # the first steps meet and warm up: neither timed nor counted
            cpu0 = time.process_time()
        started = time.perf_counter()
        transport.mark(ExchangeMarker(0, seq, index, 1 - index, 0, 1, (), 0))
        transport.receive(index, 0, seq)
        if seq >= 50:
            waits.append(time.perf_counter() - started)
    print(json.dumps({"seconds": sum(waits), "cpu": time.process_time() - cpu0, "waits": waits, "epochs": 1,
                      "sent": 0, "sent_bytes": 0, "final": {}}))
    transport.close()


def launch(count: int, args, folder: str) -> list[dict]:
    run = uuid.uuid4().hex[:12]
    addresses = [f"ipc://{folder}/{run}-{i}" for i in range(count)]
    base = {"count": count, "run": run, "rounds": args.rounds, "addresses": addresses, "nodes": args.nodes,
            "edges": args.edges, "roots": args.roots, "changes": args.changes, "epoch": args.epoch,
            "breakdown": args.breakdown}
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps({**base, "index": i})],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(count)]
    outs = [p.communicate(timeout=1800) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed:\n" + "\n".join(err[-3000:] for _, err in outs))
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def report(label: str, results: list[dict], base: tuple[float, dict] | None, changes: int,
           unit: str = "changes") -> tuple[float, dict]:
    seconds = max(r["seconds"] for r in results)
    final: dict = {}
    for r in results:
        for k, d in r["final"].items():
            final[k] = final.get(k, 0) + d
    final = {k: d for k, d in final.items() if d}
    if base is not None and final != base[1]:
        raise SystemExit(f"{label}: the output differs from the 1-worker run's")
    waits = np.array([w for r in results for w in r["waits"]]) if len(results) > 1 else np.zeros(0)
    epochs = results[0]["epochs"]
    sent = sum(r["sent"] for r in results)
    line = (f"  {label:<22} {changes / seconds:8.0f} {unit}/s"
            + (f" (ratio {base[0] / seconds:.2f})" if base else "")
            + "; CPU s per worker " + "/".join(f"{r['cpu']:.2f}" for r in results)
            + (f" ({1e6 * max(r['cpu'] for r in results) / changes:.0f} us per step)" if unit == "steps" else ""))
    if len(waits):
        line += (f"; wait per step mean {1e3 * waits.mean():.3f} ms, p99 {1e3 * np.percentile(waits, 99):.3f} ms"
                 f" ({len(waits) / len(results) / epochs:.1f} steps and "
                 f"{results[0].get('agreements', 0) / epochs:.1f} agreements per epoch)")
        if sum(r["sent_bytes"] for r in results):
            line += f"; {sum(r['sent_bytes'] for r in results) / max(sent, 1):.1f} bytes per crossing update"
    print(line, flush=True)
    for i, r in enumerate(results):
        b = r.get("breakdown")
        if b:
            print(f"    worker {i}: profiled CPU {b['total']:.2f} s, of which the exchange operators' steps "
                  f"{b['exchange_steps']:.2f} s ({100 * b['exchange_steps'] / b['total']:.0f}%), the mesh transport's "
                  f"calls {b['transport']:.2f} s ({100 * b['transport'] / b['total']:.0f}%)", flush=True)
    return seconds, final


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    print(f"reachability {args.nodes} nodes / {args.edges} edges / {args.roots} roots, {args.changes} changes, "
          f"E={args.epoch}; worker processes on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="ddflow-mesh-") as folder:
        if args.rounds:
            print(f"{args.rounds} empty exchange steps between 2 processes (per step: a marker each way)")
            report("2 workers, mesh:", launch(2, args, folder), None, args.rounds, "steps")
            return
        base = None
        for count in [int(w) for w in args.workers.split(",") if w]:
            results = launch(count, args, folder)
            got = report(f"{count} worker(s), mesh:", results, base, args.changes)
            if base is None and count == 1:
                base = got


if __name__ == "__main__":
    main()
