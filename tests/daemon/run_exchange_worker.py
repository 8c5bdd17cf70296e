"""One worker process of a multi-worker dataflow over Kafka exchange topics (for
test_exchange_kafka): ``run_exchange_worker.py BOOTSTRAP PREFIX RUN INDEX COUNT``. It feeds the
updates ``k`` with ``k % COUNT == INDEX`` of a fixed stream (the others feed the rest), runs two
epochs and prints its capture's updates as JSON."""

from __future__ import annotations

import json
import sys

from ddflow.daemon.cluster.transport import KafkaTransport
from ddflow.operators.library import reachability
from ddflow.operators.workers import worker_dataflow


def stream():
    import random

    rng = random.Random(11)
    return [(rng.randrange(30), rng.randrange(30)) for _ in range(80)]


def build(df):
    roots, edges = df.new_input("roots"), df.new_input("edges")
    return roots, edges, reachability(roots.collection, edges.collection).capture()


def main() -> None:
    bootstrap, prefix, run, index, count = sys.argv[1:6]
    index, count = int(index), int(count)
    transport = KafkaTransport(count, index, {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 1},
                               prefix=prefix, run=run, timeout=120)
    df = worker_dataflow(index, count, transport)
    roots, edges, probe = build(df)
    if index == 0:
        roots.insert(0, 0)
    graph = stream()
    for start, end in ((0, 40), (40, 80)):
        for k in range(start, end):
            if k % count == index:
                edges.insert(graph[k], 10 * k)
        roots.advance_to(10 * end)
        edges.advance_to(10 * end)
        df.run()
    transport.close()
    print(json.dumps({"frontier": probe.frontier, "updates": [[list(r), t, d] for r, t, d in probe.updates]}))


if __name__ == "__main__":
    main()
