"""Benchmark: the demo's end-to-end latency (change sent -> its output final on the result topic).

Runs ``ddflow demo`` in-process on one embedded tansu broker and prints the p50/p99 latency of
the sliding-window reachability changes, next to a baseline measured on the same broker in the
same run: the round trip of one message produced and consumed back (the floor of any pipeline
through Kafka). The demo's result view is checked against a breadth-first search; a failed
check fails the benchmark.

    .venv/bin/python tests/benchmarks/bench_demo_latency.py [--nodes 1000 --edges 2000 --changes 300 --rate 20]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
import uuid

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from ddflow.daemon.broker import EmbeddedBroker
from ddflow.daemon.cli import build_parser
from ddflow.daemon.demo import run_demo
from ddflow.daemon.kafka import ensure_topics


def round_trip_ms(bootstrap: str, samples: int = 300) -> tuple[float, float]:
    """p50/p99 of produce -> consume of one small message (fetch.wait.max.ms=10, like the demo)."""
    topic = f"bench-rtt-{uuid.uuid4().hex[:8]}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "fetch.wait.max.ms": 10,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        producer.produce(topic, b"x" * 32, partition=0)
        producer.flush(10)
        msg = None
        while msg is None or msg.error() is not None:
            msg = consumer.poll(10)
        times.append(time.perf_counter() - started)
    consumer.close()
    p50, p99 = np.percentile(np.asarray(times) * 1e3, [50, 99])
    return float(p50), float(p99)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--edges", type=int, default=2000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--changes", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="changes per second (0: closed loop, batched)")
    parser.add_argument("--max-pending", type=int, default=1000)
    args = parser.parse_args()

    os.environ.pop("KAFKA_BOOTSTRAP", None)
    with EmbeddedBroker(use_environment=False) as broker:
        rtt50, rtt99 = round_trip_ms(broker.bootstrap)
        demo_args = build_parser({}).parse_args([
            "demo", "--bootstrap", broker.bootstrap, "--quiet", "--nodes", str(args.nodes), "--edges",
            str(args.edges), "--roots", str(args.roots), "--max-updates", str(args.changes), "--rate", str(args.rate),
            "--max-pending", str(args.max_pending), "--catch-up", "600",
        ])
        out = io.StringIO()
        started = time.perf_counter()
        code = run_demo(demo_args, out=out)
        elapsed = time.perf_counter() - started
    text = out.getvalue()
    match = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms over ([\d,]+) changes", text)
    if code != 0 or match is None or "check: the result view equals" not in text:
        print(text, file=sys.stderr)
        print("benchmark FAILED: the demo's check did not pass", file=sys.stderr)
        return 1
    p50, p99 = float(match.group(1)), float(match.group(2))
    print(f"workload: sliding-window reachability, {args.nodes} nodes / {args.edges} edges / {args.roots} roots, "
          f"{args.changes} changes at {args.rate or 'max'}/s (each its own ns time), 1 ms epochs; {elapsed:.1f} s")
    print(f"baseline: broker round trip p50 {rtt50:.2f} ms, p99 {rtt99:.2f} ms")
    print(f"demo end-to-end latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"= {p50 / rtt50:.1f}x / {p99 / rtt99:.1f}x the round trip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
