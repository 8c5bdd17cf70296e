"""Benchmark: a daemon's restart time against the length of its result topics' history.

For each history length N, on an embedded tansu broker: the result topic already holds N
published epochs (progress markers, as a daemon running for days leaves behind: 4M epochs is
2.5-4 days at 12-20 epochs/s), and a worker with a checkpoint directory starts, publishes a few
epochs of new input and stops with a checkpoint. Its start is the baseline measured in the same
run: without a checkpoint it reads the result topic from offset 0, as every start used to. A
second worker then restarts from the checkpoint; its start (open: restore the checkpoint, read
the result topic from the recorded position, assign the inputs) and its time to publish the next
epoch are the restart figures. Restart time must stay flat from 1K to 4M epochs; the benchmark
prints each figure, the messages each start read, and the same-run ratios. It checks that the
restarted worker's output is right.

    .venv/bin/python benchmarks/bench_restart.py [--epochs 1000,4000000 --partitions 1]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.client import ensure_topics
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.formats.result_protocol import encode_output_progress
from ddflow.daemon.formats.msgpack import encode_progress, encode_update
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.worker import Worker

MS = 1_000_000


def echo(df: Any, inputs: Any) -> dict[str, Any]:
    return {"echo": inputs["a"]}


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", default="1000,4000000", help="history lengths (published epochs), comma-separated")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the result topic")
    return parser


def write_history(options: dict[str, Any], topic: str, epochs: int, partitions: int) -> float:
    """``epochs`` empty epochs [MIN, 1), [1, 2), ... ns on every partition; returns seconds."""
    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": options["bootstrap.servers"], "linger.ms": 50,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": True})
    lower = T_MIN
    for upper in range(1, epochs + 1):
        value = encode_output_progress(lower, upper, "history", 0)
        for p in range(partitions):
            while True:
                try:
                    producer.produce(topic, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
        lower = upper
    producer.flush(600)
    return time.perf_counter() - started


def make_worker(options: dict[str, Any], topics: dict[str, str], directory: Path) -> Worker:
    return kafka_worker(echo, [InputSpec("a", topics["a"], fields={"key": "int", "val": "int"})],
                  [OutputSpec("echo", topics["echo"])], options, group_id=f"g-{topics['a']}",
                  epochs=EpochPolicy(resolution_ns=MS), checkpoint_dir=str(directory), checkpoint_interval=3600.0)


def send(options: dict[str, Any], topic: str, *values: bytes) -> None:
    producer = Producer({"bootstrap.servers": options["bootstrap.servers"]})
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(30)


def measure(options: dict[str, Any], epochs: int, partitions: int) -> dict[str, float]:
    run = uuid.uuid4().hex[:6]
    topics = {"a": f"bench-restart-a-{run}", "echo": f"bench-restart-echo-{run}"}
    ensure_topics(options, {topics["a"]: 1, topics["echo"]: partitions})
    history_s = write_history(options, topics["echo"], epochs, partitions)
    t0 = (epochs + 1) * MS
    send(options, topics["a"], encode_update([1, 1], t0, 1), encode_progress(t0 + MS))
    with tempfile.TemporaryDirectory() as tmp:
        first = make_worker(options, topics, Path(tmp))
        started = time.perf_counter()
        first.open()  # no checkpoint yet: reads the result topic from offset 0
        cold_open = time.perf_counter() - started
        cold_read = first.sink.resume_stats.messages
        first.run(until=t0 + MS, timeout=600)
        first.stop()
        first.run(timeout=600)  # publishes what is complete and writes a checkpoint
        first.close()

        second = make_worker(options, topics, Path(tmp))
        send(options, topics["a"], encode_update([2, 1], t0 + MS, 1), encode_progress(t0 + 2 * MS))
        started = time.perf_counter()
        second.open()
        restart_open = time.perf_counter() - started
        second.run(until=t0 + 2 * MS, timeout=600)
        restart_publish = time.perf_counter() - started
        restart_read = second.sink.resume_stats.messages
        assert second.recovery.restored is not None and second.recovery.restored.frontier == t0 + MS
        second.close()
    with ResultClient(topics["echo"], options) as client:
        assert client.wait_for(t0 + 2 * MS, timeout=600), "the restarted worker did not publish"
        assert client.view == {(1, 1): 1, (2, 1): 1}, client.view
        assert client.stats.duplicate_epochs == 0 and client.stats.incomplete_epochs == 0
    return {"history_s": history_s, "cold_open": cold_open, "cold_read": cold_read, "restart_open": restart_open,
            "restart_publish": restart_publish, "restart_read": restart_read}


def main() -> int:
    args = arguments().parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(n) for n in args.epochs.split(",") if n]
    with EmbeddedBroker() as broker:
        options = {"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 10}
        measure(options, 10, args.partitions)  # warm-up: imports, first transactions, first checkpoint
        results = {}
        for n in sizes:
            r = results[n] = measure(options, n, args.partitions)
            print(f"{n:>9,} epochs of history ({args.partitions} partition(s), written in {r['history_s']:.1f} s): "
                  f"start without a checkpoint (reads from offset 0) {r['cold_open']:.2f} s, "
                  f"{int(r['cold_read']):,} messages; restart from the checkpoint: open {r['restart_open']:.3f} s, "
                  f"next epoch published {r['restart_publish']:.3f} s, {int(r['restart_read']):,} messages read",
                  flush=True)
        if len(sizes) > 1:
            small, large = results[sizes[0]], results[sizes[-1]]
            ratio = large["restart_open"] / small["restart_open"]
            print(f"restart open {sizes[-1]:,} / {sizes[0]:,} epochs: x{ratio:.2f} "
                  f"(next epoch published: x{large['restart_publish'] / small['restart_publish']:.2f}); "
                  f"reading from offset 0: x{large['cold_open'] / small['cold_open']:.1f}; "
                  f"restart / read-from-0 at {sizes[-1]:,}: {large['restart_open'] / large['cold_open']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
