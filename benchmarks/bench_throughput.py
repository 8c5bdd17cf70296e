"""Benchmark: the daemon's end-to-end updates/s on a map-only dataflow, as a ratio to bare loops.

Run: ``.venv/bin/python benchmarks/bench_throughput.py [--updates N] [--batch B]``

One broker (tansu, or ``KAFKA_BOOTSTRAP``), one input topic filled once with N updates in batch
messages of B updates (the producer helper's format) and progress markers. Over the same
messages, in the same run, it measures:

* ``bare``: a confluent-kafka loop that consumes every message and produces its bytes unchanged
  to another topic (then flushes) - the floor any Kafka-to-Kafka service pays;
* ``decode``: the same loop decoding each batch with msgpack, applying the map per update in
  Python and re-encoding (what a hand-written per-record service does);
* ``daemon``: a `Worker` running ``map(lambda r: (r[0], r[1] + 1))`` from the first poll until
  the output frontier passes the last update (validation, engine epochs, output protocol with
  progress markers, one transaction per epoch).

It prints updates/s for each and the ratios daemon/bare and daemon/decode.
"""

from __future__ import annotations

import argparse
import time
import uuid

import msgpack
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker

STEP = 1_000_000  # 1 ms of data time per 1,000 updates


def map_only(df, inputs):
    """The benchmark's dataflow: every record ``(k, v)`` becomes ``(k, v + 1)``."""
    return {"out": inputs["a"].map(lambda r: (r[0], r[1] + 1))}


def create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(10)


def fill(options: dict, topic: str, updates: int, batch: int) -> int:
    """N updates of (key, value) at increasing times, a marker every 10,000; returns the end time."""
    with UpdateProducer(topic, options, batch_size=batch) as producer:
        for i in range(updates):
            producer.send((i % 1000, i), i * (STEP // 1000), 1)
            if (i + 1) % 10_000 == 0:
                producer.advance_to((i + 1) * (STEP // 1000))
        end = updates * (STEP // 1000)
        producer.advance_to(end)
    return end


def consumer(options: dict, topic: str) -> Consumer:
    c = Consumer({**options, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    return c


def bare_loop(options: dict, src: str, dst: str, *, transform: bool) -> tuple[int, float]:
    """Consume every message of ``src`` and produce it (or its mapped updates) to ``dst``."""
    c = consumer(options, src)
    p = Producer({**options, "linger.ms": 5})
    updates = 0
    started = None
    while True:
        msgs = c.consume(10_000, 0.5)
        if started is None and msgs:
            started = time.perf_counter()
        done = False
        for m in msgs:
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done = True
                    continue
                raise RuntimeError(str(m.error()))
            value = m.value()
            if transform:
                obj = msgpack.unpackb(value, use_list=False)
                if isinstance(obj, dict):
                    continue
                out = [((d[0], d[1] + 1), t, r) for d, t, r in obj]
                updates += len(out)
                value = msgpack.packb(out)
            while True:
                try:
                    p.produce(dst, value)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        if done:
            break
    p.flush(60)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    c.close()
    return updates, elapsed


def daemon_run(options: dict, src: str, dst: str, end: int) -> float:
    worker = kafka_worker(map_only, [InputSpec("a", src, fields=["k", "v"])], [OutputSpec("out", dst)], options,
                    group_id=f"bench-{uuid.uuid4().hex[:6]}", epochs=EpochPolicy(resolution_ns=STEP))
    with worker:
        started = time.perf_counter()
        worker.run(until=end, timeout=600)
        elapsed = time.perf_counter() - started
        assert worker.frontier == end, worker.frontier
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000, help="updates per input message")
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        options = {"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 10}
        src, bare_dst, decode_dst, daemon_dst = (f"bench-{n}-{uuid.uuid4().hex[:6]}" for n in ("in", "bare", "dec", "out"))
        create(broker.bootstrap, src, bare_dst, decode_dst, daemon_dst)
        end = fill(options, src, args.updates, args.batch)
        _, bare_s = bare_loop(options, src, bare_dst, transform=False)
        decoded, decode_s = bare_loop(options, src, decode_dst, transform=True)
        assert decoded == args.updates, decoded
        daemon_s = daemon_run(options, src, daemon_dst, end)
    n = args.updates
    rates = {"bare": n / bare_s, "decode": n / decode_s, "daemon": n / daemon_s}
    print(f"map-only, {n:,} updates in messages of {args.batch}, one partition, tansu memory storage")
    for name, rate in rates.items():
        print(f"  {name:7s} {rate:12,.0f} updates/s")
    print(f"  daemon/bare   = {rates['daemon'] / rates['bare']:.3f}")
    print(f"  daemon/decode = {rates['daemon'] / rates['decode']:.3f}")


if __name__ == "__main__":
    main()
