"""Benchmark: the demo's end-to-end latency (change sent -> its output final on the result topic).

Runs ``ddflow demo`` in-process on one embedded tansu broker and prints the p50/p99 latency of
the sliding-window reachability changes, next to a baseline measured on the same broker in the
same run: the round trip of one message produced and consumed back (the floor of any pipeline
through Kafka). The demo's result view is checked against a breadth-first search; a failed
check fails the benchmark.

    .venv/bin/python benchmarks/bench_demo_latency.py [--nodes 1000 --edges 2000 --changes 300 --rate 20]

``--stages`` also time-stamps each stage of every change's path (probes wrapped around the demo's
generator, the daemon's source poll, epoch close and commit, and the result client) and prints
the p50/p90/p99 of each: sent -> read by the daemon (the producer's send and the consumer's
fetch, data and progress marker) -> its epoch closes (the loop's wait) -> the epoch computed and
encoded (the engine) -> its commit starts -> the transaction landed -> final at the result client
(its fetch). Each stage of a change starts where its previous one ended, so the stages add up to
its end-to-end latency.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
import uuid
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.cli.parser import build_parser
from ddflow.daemon.cli.demo import run_demo
from ddflow.daemon.kafka.client import ensure_topics


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


class Stages:
    """Probes on the demo's path: (kind, key, wall ns) events, matched per change afterwards."""

    KINDS = ("read", "closing", "closed", "committing", "landed", "final")
    LABELS = ("sent -> read by the daemon", "read -> its epoch closes", "the epoch (engine, encoding)",
              "closed -> its commit starts", "the transaction", "landed -> final at the client")

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[int, int]]] = {k: [] for k in self.KINDS}
        self.sent: list[int] = []

    def _at(self, kind: str, key: int) -> None:
        self.events[kind].append((key, time.time_ns()))

    def install(self) -> None:
        from ddflow.daemon.cli import demo
        from ddflow.daemon.output import sink
        from ddflow.daemon.input import source
        from ddflow.daemon import worker

        stages, last = self, [None]

        def wrap(cls: type, name: str, before: Any = None, after: Any = None) -> None:
            original = getattr(cls, name)

            def probe(obj: Any, *args: Any, **kwargs: Any) -> Any:
                if before is not None:
                    before(obj, *args)
                value = original(obj, *args, **kwargs)
                if after is not None:
                    after(obj, value, *args)
                return value

            setattr(cls, name, probe)

        def read(src: Any, _value: Any, *_: Any) -> None:
            frontier = src.frontier()
            if frontier is not None and frontier != last[0]:
                last[0] = frontier
                stages._at("read", frontier)

        wrap(source.KafkaSource, "poll", after=read)
        wrap(worker.Worker, "_close_epoch", before=lambda w, upper: stages._at("closing", upper),
             after=lambda w, _v, upper: stages._at("closed", upper))
        wrap(sink.KafkaSink, "_start", before=lambda k: stages._at("committing", k._window.upper or 0))
        wrap(sink.KafkaSink, "_commit", after=lambda k, _v, window, *_: stages._at("landed", window.upper or 0))
        wrap(demo.LatencyTracker, "sent", before=lambda _t, t: stages.sent.append(t))
        wrap(demo.LatencyTracker, "final_below",
             before=lambda _t, frontier, _now: stages._at("final", MAX_KEY if frontier is None else frontier))

    def report(self) -> None:
        """Per change, each stage's end: the first event of its kind past the change's time (keys
        only grow, so one pass each). A stage ends no later than the next one (the client may see
        a transaction before the committer's thread returns from it), so they add up exactly."""
        rows = []
        cursors = dict.fromkeys(self.KINDS, 0)
        for t in self.sent:
            row = [t]
            for kind in self.KINDS:
                events, i = self.events[kind], cursors[kind]
                while i < len(events) and events[i][0] <= t:
                    i += 1
                cursors[kind] = i
                if i == len(events):
                    break
                row.append(events[i][1])
            if len(row) == len(self.KINDS) + 1:
                for k in range(len(row) - 2, 0, -1):
                    row[k] = min(row[k], row[k + 1])
                rows.append(row)
        if not rows:
            print("stages: no change could be traced")
            return
        table = np.diff(np.asarray(rows, dtype=np.float64), axis=1) / 1e6
        print(f"stages of {len(rows):,} changes (ms)       p50     p90     p99")
        for label, column in zip(self.LABELS, table.T, strict=True):
            p50, p90, p99 = np.percentile(column, [50, 90, 99])
            print(f"  {label:<32} {p50:7.2f} {p90:7.2f} {p99:7.2f}")
        total = table.sum(axis=1)
        print(f"  {'end to end':<32} {np.percentile(total, 50):7.2f} {np.percentile(total, 90):7.2f} "
              f"{np.percentile(total, 99):7.2f}")


MAX_KEY = 2**63 - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--edges", type=int, default=2000)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--changes", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="changes per second (0: closed loop, batched)")
    parser.add_argument("--max-pending", type=int, default=1000)
    parser.add_argument("--stages", action="store_true", help="also time each stage of a change's path")
    args = parser.parse_args()
    stages = Stages() if args.stages else None
    if stages is not None:
        stages.install()

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
    initial = re.search(r"initial graph: .*", text)
    if initial is not None:
        print(initial.group(0) + " (the changes start then)")
    print(f"demo end-to-end latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"= {p50 / rtt50:.1f}x / {p99 / rtt99:.1f}x the round trip")
    if stages is not None:
        stages.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
