"""Benchmark: checkpoint size, write time and restore time for a 1,000,000-edge graph input.

A worker on an embedded tansu broker reads a graph of M edges (``numpy.random.default_rng(42)
.integers(0, N, (M, 2))``, as the seeds' workloads; the initial graph, all at time 0) from its
input topic and computes the out-degree distribution, then writes a checkpoint of its input.
The baseline, measured in the same run, is what a worker without checkpoints does after a
restart: replay the topic from the beginning. A second worker then restores the checkpoint; the benchmark prints the
checkpoint's size and write time, the restore time (open -> output at the checkpoint's frontier
published, and its parts: reading the snapshot, feeding the engine) and the ratio to the replay.
Both workers' result views must equal the degree distribution computed with numpy. With
``--changes C`` the topic also holds C sliding-window changes (change k removes edge k and adds
edge M+k): the replay reads M + 2C updates, the checkpoint still holds M edges.

    .venv/bin/python benchmarks/bench_checkpoint.py [--edges 1000000 --nodes 1000000 --changes 0]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any


from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.client import ensure_topics
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.state.snapshot import Snapshot
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.worker import Worker
from ddflow.operators.testing import window_edges

T_END = 1_000_000  # the edges are at time 0; one progress marker promises T_END


def degree_distribution(df: Any, inputs: Any) -> dict[str, Any]:
    """(out-degree, number of nodes with it) over the edge collection."""
    degrees = inputs["edges"].map(lambda e: e[0]).count()
    return {"degrees": degrees.map(lambda kc: kc[1]).count()}


def make_worker(options: dict[str, Any], topics: dict[str, str], directory: Path, group: str) -> Worker:
    return kafka_worker(degree_distribution, [InputSpec("edges", topics["edges"], fields={"src": "int", "dst": "int"})],
                  [OutputSpec("degrees", topics["degrees"])], options, group_id=group,
                  epochs=EpochPolicy(resolution_ns=T_END), checkpoint_dir=str(directory), checkpoint_interval=3600.0,
                  max_poll_messages=2000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    generated = window_edges(args.nodes, args.edges, args.changes)
    edges = generated[args.changes:]  # the window after the changes
    expected = Counter(Counter(edges[:, 0].tolist()).values())
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        options = {"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 10}
        run = uuid.uuid4().hex[:6]
        topics = {"edges": f"bench-edges-{run}", "degrees": f"bench-degrees-{run}"}
        ensure_topics(options, {topics["edges"]: args.partitions, topics["degrees"]: 1})
        started = time.perf_counter()
        with UpdateProducer(topics["edges"], options, batch_size=1000) as producer:
            pairs = generated.tolist()
            for src, dst in pairs[: args.edges]:
                producer.send((src, dst), 0, 1)
            for k in range(args.changes):
                producer.send(tuple(pairs[k]), 0, -1)
                producer.send(tuple(pairs[args.edges + k]), 0, 1)
            producer.advance_to(T_END)
        updates = args.edges + 2 * args.changes
        print(f"produced {args.edges:,} edges and {args.changes:,} changes ({updates:,} updates) in "
              f"{time.perf_counter() - started:.1f} s")

        directory = Path(tmp) / "checkpoints"
        replay = make_worker(options, topics, directory, f"bench-{run}-a")
        started = time.perf_counter()
        replay.open()
        replay.run(until=T_END, timeout=3600)
        replay_s = time.perf_counter() - started
        started = time.perf_counter()
        checkpoint = replay.recovery.checkpoint(replay.frontier, replay.source.next_offsets())
        write_s = time.perf_counter() - started
        replay.close()
        files = sum(1 for _ in checkpoint.files())
        print(f"replay from the topic (the baseline): {replay_s:.1f} s ({updates / replay_s:,.0f} updates/s)")
        print(f"checkpoint write: {write_s:.2f} s, {checkpoint.size_bytes / 1e6:.1f} MB in {files} shard files "
              f"({checkpoint.size_bytes / args.edges:.1f} bytes per edge)")

        started = time.perf_counter()
        snapshot = Snapshot.open(checkpoint.path)
        snapshot.verify()
        base, _ = snapshot.read_input("edges")
        read_s = time.perf_counter() - started
        assert sum(count for _, count in base) == args.edges

        restored = make_worker(options, topics, directory, f"bench-{run}-b")
        reports = []
        restored.stats.on_epoch(reports.append)
        started = time.perf_counter()
        restored.open()
        while not reports:
            restored.step()
        restore_s = time.perf_counter() - started
        restored.close()
        assert reports[0].upper == T_END and restored.recovery.restored.frontier == T_END
        print(f"restore: {restore_s:.1f} s (open -> output at the frontier), of which reading and checking the "
              f"snapshot {read_s:.1f} s; {restore_s / replay_s:.2f}x the replay")
        with ResultClient(topics["degrees"], options) as client:
            client.wait_for(T_END, timeout=60)
            client.catch_up()
            view = {degree: nodes for (degree, nodes), count in client.view.items() if count == 1}
        assert view == dict(expected), "the degree distribution differs from numpy's"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
