"""One worker process of a multi-worker dataflow over the mesh (for test_mesh):
``run_mesh_worker.py ADDRESSES INDEX RUN`` (ADDRESSES: the workers' addresses, comma-separated).
It feeds the updates ``k`` with ``k % COUNT == INDEX`` of a fixed stream (the others feed the
rest), runs three epochs and prints its captures' updates and its mesh's figures as JSON."""

from __future__ import annotations

import json
import random
import sys

from ddflow.daemon.cluster.mesh import MeshTransport
from ddflow.operators.library import reachability
from ddflow.operators.workers import worker_dataflow

EPOCHS = ((0, 40), (40, 80), (80, 120))


def stream() -> list[tuple[tuple[int, int], int]]:
    """Edge changes ``((src, dst), diff)``: inserts, and later removals of earlier edges."""
    rng = random.Random(11)
    edges: list[tuple[int, int]] = []
    out = []
    for k in range(120):
        if edges and rng.random() < 0.25:
            out.append((edges.pop(rng.randrange(len(edges))), -1))
        else:
            edges.append((rng.randrange(30), rng.randrange(30)))
            out.append((edges[-1], 1))
    return out


def build(df):
    """Reachability (pairs of ints: column frames) and a reduction over string-valued records
    (values that cross as codes)."""
    roots, edges = df.new_input("roots"), df.new_input("edges")
    labels = (edges.collection.map(lambda e: (f"node-{e[0]}", f"n{e[1]}"))
              .reduce(lambda key, vals: [(",".join(sorted(v for v, _ in vals)), 1)]))
    return roots, edges, [reachability(roots.collection, edges.collection).capture(), labels.capture()]


def feed(roots, edges, start: int, end: int, mine=lambda k: True) -> None:
    changes = stream()
    for k in range(start, end):
        if mine(k):
            edges.update(changes[k][0], 10 * k, changes[k][1])
    roots.advance_to(10 * end)
    edges.advance_to(10 * end)


def main() -> None:
    addresses, index, run = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
    count = len(addresses)
    transport = MeshTransport(addresses, index, run=run, start_timeout=120)
    df = worker_dataflow(index, count, transport)
    roots, edges, probes = build(df)
    if index == 0:
        roots.insert(0, 0)
    for start, end in EPOCHS:
        feed(roots, edges, start, end, lambda k: k % count == index)
        df.run()
    figures = {"steps": transport.steps, "sent_bytes": transport.sent_bytes}
    transport.close()
    print(json.dumps({"frontier": [p.frontier for p in probes], "figures": figures,
                      "updates": [[[r, t, d] for r, t, d in p.updates] for p in probes]}))


if __name__ == "__main__":
    main()
