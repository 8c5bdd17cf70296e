"""Benchmark: catching up a backlog in bounded memory.

A backlog of B updates (default 10,000,000) waits on the input topic of a daemon that was down:
messages of 1,000 updates, each followed by a progress marker (a producer advancing after every
batch), on 2 partitions. The dataflow counts the records per key and, with ``--echo``, also
publishes every input record (the output side in flight too). The records are (key, val) with
1,000 keys and 100 vals, so the state (the interner, which keeps every distinct record seen, and
the arrangements) stays small and what could grow with the backlog is what the daemon holds in
flight. Epochs are fixed, 50 time units wide (50 messages, 50,000 updates). A worker then catches
up with ``max_epoch_updates`` = ``--max-updates`` (0: unbounded, as before: one poll of 10,000
messages is fed at once). The benchmark prints the time, throughput, number and largest size of the epochs, the
largest number of updates held in flight, the worker's RSS as the backlog is read (sampled every
0.2 s) and its peak over its RSS before it opened (the producer runs in another process, so the
peak is the daemon's), and checks the counts against the backlog.

    .venv/bin/python benchmarks/bench_backlog.py [--updates 10000000 --max-updates 100000 --echo]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import resource
import threading
import time
import uuid
from typing import Any

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.kafka.client import ensure_topics
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec

KEYS = 1_000
VALS = 100
PER_MESSAGE = 1_000
PARTITIONS = 2


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=10_000_000, help="updates in the backlog")
    parser.add_argument("--max-updates", type=int, default=100_000, help="max_epoch_updates (0: unbounded)")
    parser.add_argument("--echo", action="store_true", help="also publish every input record")
    return parser


def counts(df: Any, inputs: Any) -> dict[str, Any]:
    return {"counts": inputs["a"].map(lambda r: r[0]).count()}


def counts_and_echo(df: Any, inputs: Any) -> dict[str, Any]:
    return {"counts": inputs["a"].map(lambda r: r[0]).count(), "echo": inputs["a"]}


def produce(bootstrap: str, topic: str, updates: int) -> None:
    """The backlog: message m (on partition m % 2) holds updates at time m, then promises m + 1."""
    from confluent_kafka import Producer

    from ddflow.daemon.formats.msgpack import encode_progress, encode_updates

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.kbytes": 262144})
    for m in range(updates // PER_MESSAGE):
        base = m * PER_MESSAGE
        batch = [([(base + i) % KEYS, (base + i) // KEYS % VALS], m, 1) for i in range(PER_MESSAGE)]
        for value in (encode_updates(batch), encode_progress(m + 1)):
            while True:
                try:
                    producer.produce(topic, value, partition=m % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.05)
    for p in range(PARTITIONS):  # the partition that got no last message promises the end too
        producer.produce(topic, encode_progress(updates // PER_MESSAGE), partition=p)
    producer.flush(600)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    args = arguments().parse_args()
    logging.basicConfig(level=logging.WARNING)
    messages = args.updates // PER_MESSAGE
    end = messages
    with EmbeddedBroker() as broker:
        options = {"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 10}
        run = uuid.uuid4().hex[:6]
        topics = {"a": f"bench-backlog-a-{run}", "counts": f"bench-backlog-counts-{run}",
                  "echo": f"bench-backlog-echo-{run}"}
        ensure_topics(options, {topics["a"]: PARTITIONS, topics["counts"]: 1, topics["echo"]: 1})
        started = time.perf_counter()
        producer = multiprocessing.get_context("spawn").Process(target=produce,
                                                                 args=(broker.bootstrap, topics["a"], args.updates))
        producer.start()
        producer.join()
        print(f"backlog: {messages * PER_MESSAGE:,} updates in {messages:,} messages on {PARTITIONS} partitions, "
              f"produced in {time.perf_counter() - started:.1f} s", flush=True)
        outputs = [OutputSpec("counts", topics["counts"])] + ([OutputSpec("echo", topics["echo"])] if args.echo else [])
        worker = kafka_worker(counts_and_echo if args.echo else counts,
                              [InputSpec("a", topics["a"], fields={"key": "int", "val": "int"})], outputs, options,
                              group_id=f"g-{run}", epochs=EpochPolicy(resolution_ns=50),
                              max_epoch_updates=args.max_updates or None)
        epochs: list[int] = []
        worker.stats.on_epoch(lambda report: epochs.append(sum(report.updates_in.values())))
        before = rss_mb()
        samples: list[tuple[int, float]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                samples.append((worker.stats.input("a").updates, rss_mb()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        worker.run(until=end, timeout=7200)
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        worker.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with ResultClient(topics["counts"], options) as client:
            assert client.wait_for(end, timeout=3600), "the counts did not reach the end of the backlog"
            per_key = messages * PER_MESSAGE // KEYS
            assert client.view == {(k, per_key): 1 for k in range(KEYS)}, "wrong counts"
    marks = []
    for share in (0.1, 0.25, 0.5, 0.75, 1.0):
        taken = [mb for n, mb in samples if n <= share * messages * PER_MESSAGE]
        if taken:
            marks.append(f"{share:.0%} {max(taken):,.0f} MB")
    print(f"RSS (largest sample) up to each share of the backlog read: {', '.join(marks)}")
    limit = f"{args.max_updates:,}" if args.max_updates else "unbounded"
    print(f"max_epoch_updates {limit}{' (with echo)' if args.echo else ''}: caught up in {seconds:.1f} s "
          f"({sum(epochs) / seconds:,.0f} updates/s), {len(epochs):,} epochs, largest {max(epochs):,} updates fed, "
          f"at most {worker.peak_open_updates:,} in flight; RSS {before:,.0f} MB before open, peak {peak:,.0f} MB "
          f"(+{peak - before:,.0f} MB, {(peak - before) * 1e6 / max(1, worker.peak_open_updates):,.0f} bytes per "
          f"update in flight)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
