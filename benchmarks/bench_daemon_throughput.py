"""Benchmark: `ddflow run` end to end at 1 ms epochs, as a ratio to a bare consume -> produce pipe.

Run: ``.venv/bin/python benchmarks/bench_daemon_throughput.py [--updates N] [--batch B]
[--max-updates M] [--commit-interval D]``

One embedded broker (tansu, memory storage). One input topic is filled once with N page views
``(user, page)`` (default 1,000,000; int fields) in messages of B updates (default 1,000), their
times 1 us apart, with a progress marker after every 1 ms of data time: N / 1,000 epochs of 1 ms.
Over the same messages, in the same run, it measures:

* ``pipe``: a bare confluent-kafka loop consuming every message and producing its bytes unchanged
  to another topic, then flushing (the floor any Kafka-to-Kafka service pays);
* ``count``: ``ddflow run`` with ``page_counts`` (views counted per page), a subprocess with a
  config file, from its start until its progress marker at the end is committed on the output
  topic (watched by a read_committed consumer that decodes only the markers, so that, like the
  pipe, the benchmark spends next to nothing reading: a result client decoding all 1M output
  updates in Python took ~2.3 s of CPU on the same cores and finished ~2 s after the daemon);
* ``map``: the same with a map-only dataflow (``(user, page) -> (user, page + 1)``);
* ``map/each``: ``map`` with ``kafka.commit_interval = "0s"`` (a transaction as soon as the one before
  landed), as a baseline for the commit window.

The daemons feed at most M updates per epoch over the backlog (``epoch.max_updates``, default
1,000: the 1 ms epochs of the input) and commit every D (default 50 ms). Every daemon's results
are checked after its run, untimed, by a `ResultClient` (the counts per page; the number of
mapped records). It prints updates/s for each (a
daemon's time includes its start: imports, numba, connecting, reading the result topics back) and
the ratio daemon/pipe (target 0.5); then the same from the daemon's first commit on (the epochs
read after the watcher's first read of markers, so its start is left out, as the pipe's is: the
pipe's clock starts at its first message), and how many epochs the daemon published, with its
time and CPU time per epoch after its first commit. Then each flow runs over the in-memory source and sink (`ddflow.daemon.testing`) with
exactly one 1 ms epoch per poll (the worker without Kafka), and on a bare Dataflow fed the same
epochs as int columns and drained as columns (the engine alone); last, the time per epoch outside
the engine: the daemon's time per epoch after its first commit, minus the engine's (target at most 1 ms),
in wall time and in CPU time (the daemon process's, every thread, read from /proc; on a shared
machine the CPU figure is the one to compare between runs).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from result_markers import committed_markers, marker_consumer

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

HERE = Path(__file__).resolve().parent
PAGES = 100
NS_PER_UPDATE = 1_000  # 1,000 updates per 1 ms epoch


def map_only(df: Any, inputs: Any) -> dict[str, Any]:
    """``(user, page) -> (user, page + 1)``: the engine's per-record cost with no state."""
    return {"out": inputs["views"].map(_next_page)}


def _next_page(view: tuple[int, int]) -> tuple[int, int]:
    return (view[0], view[1] + 1)


def create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(10)


def fill(options: dict[str, Any], topic: str, updates: int, batch: int) -> int:
    """N views ``(user, page)`` 1 us apart, a marker after every 1 ms; returns the end time."""
    per_epoch = 1_000_000 // NS_PER_UPDATE
    with UpdateProducer(topic, options, batch_size=batch) as producer:
        for i in range(updates):
            producer.send((i, i % PAGES), i * NS_PER_UPDATE, 1)
            if (i + 1) % per_epoch == 0:
                producer.advance_to((i + 1) * NS_PER_UPDATE)
        end = updates * NS_PER_UPDATE
        producer.advance_to(end)
    return end


def pipe(options: dict[str, Any], src: str, dst: str) -> float:
    """Seconds to consume every message of ``src`` and produce it unchanged to ``dst`` (flushed)."""
    c = Consumer({**options, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(src, 0, 0)])
    p = Producer({**options, "linger.ms": 5})
    started = None
    done = False
    while not done:
        msgs = c.consume(10_000, 0.5)
        if started is None and msgs:
            started = time.perf_counter()
        for m in msgs:
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done = True
                    continue
                raise RuntimeError(str(m.error()))
            while True:
                try:
                    p.produce(dst, m.value())
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
    p.flush(60)
    c.close()
    return time.perf_counter() - (started or time.perf_counter())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon(bootstrap: str, src: str, dst: str, function: str, output: str, end: int,
           workdir: Path, *, max_updates: int, commit_interval: str
           ) -> tuple[float, float, float, int, int, ResultClient]:
    """Run ``ddflow run`` over ``src`` until its marker reaching ``end`` is committed (`watch_end`):
    (seconds from the start of the process, seconds from its first commit seen, the daemon's CPU
    seconds from then, epochs published, epochs published after its first commit, a result client
    holding the final view, read after the run)."""
    config = workdir / f"{output}.toml"
    config.write_text(f"""
[dataflow]
function = "{function}"

[kafka]
bootstrap = "{bootstrap}"
group_id = "bench-{uuid.uuid4().hex[:6]}"
commit_interval = "{commit_interval}"

[[inputs]]
name = "views"
topic = "{src}"
fields = {{ user = "int", page = "int" }}

[[outputs]]
name = "{output}"
topic = "{dst}"

[epoch]
resolution = "1ms"
max_updates = {max_updates}

[metrics]
address = "127.0.0.1:{free_port()}"
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    log = (workdir / f"{output}.log").open("w")  # a file, not a pipe nobody reads (a full pipe blocks the daemon)
    proc = subprocess.Popen([sys.executable, "-m", "ddflow.daemon.cli.parser", "run", "--config", str(config)],
                            env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        first, _, cpu, epochs, after = watch_end(bootstrap, dst, end, proc, workdir / f"{output}.log")
        finished = time.perf_counter()
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    client = ResultClient(dst, {"bootstrap.servers": bootstrap}).__enter__()  # the results, read untimed
    try:
        for change in client.changes(timeout=600):
            if change.frontier is not None and change.frontier >= end:
                break
    finally:
        client.__exit__(None, None, None)
    assert client.frontier is not None and client.frontier >= end, client.frontier
    return finished - started, finished - first, cpu, epochs, after, client


def watch_end(bootstrap: str, topic: str, end: int, proc: subprocess.Popen[str], log: Path,
              timeout: float = 600) -> tuple[float, float, float, int, int]:
    """Wait until the daemon's progress marker reaching ``end`` is committed on ``topic`` (one
    partition), watched by `result_markers` (the batches of updates left undecoded). Returns (when
    the first marker was seen, the daemon's CPU seconds then, its CPU seconds from then to the end,
    the markers seen: one per published epoch, and those of them read after the first read that
    brought markers: the epochs of the daemon's first commit, which includes its start, are left
    out of the figures per epoch)."""
    c = marker_consumer(bootstrap, topic)
    first: float | None = None
    first_cpu = 0.0
    epochs = before = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if first is not None and not before:
                before = epochs  # the markers of the first read: the first commit's epochs
            for _, marker in committed_markers(c):
                epochs += 1
                if first is None:
                    first, first_cpu = time.perf_counter(), cpu_seconds(proc.pid)
                if marker.upper is None or marker.upper >= end:
                    return first, first_cpu, cpu_seconds(proc.pid) - first_cpu, epochs, epochs - (before or epochs)
            if proc.poll() is not None:
                raise RuntimeError(f"ddflow run exited {proc.returncode}: {log.read_text()[-2000:]}")
    finally:
        c.close()
    raise RuntimeError(f"no marker reaching {end} on {topic} within {timeout} s")


def in_memory(function: Any, output: str, updates: int, batch: int) -> tuple[float, float, int]:
    """The same flow over the in-memory source and sink, one 1 ms epoch per poll: (seconds, CPU
    seconds, epochs).
    What an epoch costs without Kafka: decoding and validation, the engine, draining the output."""
    from ddflow.daemon import EpochPolicy, InputSpec, Worker
    from ddflow.daemon.testing import ListSink, ReplaySource

    sink = ListSink([output], dead_letter_topic=None)
    source = ReplaySource([InputSpec("views", "views", fields={"user": "int", "page": "int"})])
    per_epoch = 1_000_000 // NS_PER_UPDATE
    for start in range(0, updates, per_epoch):
        for lo in range(start, min(start + per_epoch, updates), batch):
            hi = min(lo + batch, start + per_epoch, updates)
            source.send_updates("views", [((i, i % PAGES), i * NS_PER_UPDATE, 1) for i in range(lo, hi)])
        source.advance_to("views", min(start + per_epoch, updates) * NS_PER_UPDATE)
    messages_per_epoch = -(-per_epoch // batch) + 1
    worker = Worker(function, source, sink, epochs=EpochPolicy(resolution_ns=1_000_000),
                    max_poll_messages=messages_per_epoch, poll_timeout=0)
    with worker:
        started, cpu = time.perf_counter(), time.process_time()
        worker.run(until=updates * NS_PER_UPDATE, timeout=3600)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, len(sink.epochs)


def engine_only(function: Any, output: str, updates: int) -> tuple[float, float, int]:
    """The same flow on a bare Dataflow, 1 ms epochs of 1,000 updates: each epoch's updates fed as
    int columns (as a source decodes them), the input advanced, the dataflow run and the output
    drained as columns (as a worker does): what the engine itself costs per epoch. (seconds, CPU
    seconds, epochs), the first epoch (kernels loading) left out as the daemons' is."""
    import numpy as np

    from ddflow.operators import Dataflow

    df = Dataflow()
    session = df.new_input("views")
    capture = function(df, {"views": session.collection})[output].capture(history=False)
    index = np.arange(updates, dtype=np.int64)
    records = np.stack([index, index % PAGES], axis=1)
    times, diffs = index * NS_PER_UPDATE, np.ones(updates, dtype=np.int64)
    per_epoch = 1_000_000 // NS_PER_UPDATE
    started = cpu = 0.0
    for epoch, lo in enumerate(range(0, updates, per_epoch)):
        if epoch == 1:
            started, cpu = time.perf_counter(), time.process_time()
        hi = min(lo + per_epoch, updates)
        session.update_many(records[lo:hi], times[lo:hi], diffs[lo:hi])
        session.advance_to(hi * NS_PER_UPDATE)
        df.run()
        capture.drain_columns()
    epochs = -(-updates // per_epoch) - 1
    return time.perf_counter() - started, time.process_time() - cpu, epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000, help="updates per input message")
    parser.add_argument("--max-updates", type=int, default=1000,
                        help="epoch.max_updates: updates fed per epoch over the backlog (1,000: the 1 ms epochs)")
    parser.add_argument("--commit-interval", default="50ms", help="kafka.commit_interval of the daemons")
    args = parser.parse_args()
    knobs = {"max_updates": args.max_updates, "commit_interval": args.commit_interval}
    n = args.updates
    epochs = n * NS_PER_UPDATE // 1_000_000
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        options = {"bootstrap.servers": broker.bootstrap}
        src, pipe_dst, count_dst, map_dst = (f"bench-{x}-{uuid.uuid4().hex[:6]}" for x in ("in", "pipe", "count", "map"))
        create(broker.bootstrap, src, pipe_dst, count_dst, map_dst, "ddflow-dead-letters")  # (the daemons' default)
        end = fill(options, src, n, args.batch)
        pipe_s = pipe(options, src, pipe_dst)
        count_s, count_steady, count_cpu, count_epochs, count_after, counts = daemon(
            broker.bootstrap, src, count_dst, "ddflow.config.dataflows:page_counts", "page_views", end, Path(tmp), **knobs)
        expected = Counter(i % PAGES for i in range(n))
        assert counts.view == {(page, c): 1 for page, c in expected.items()}, "wrong counts"
        map_s, map_steady, map_cpu, map_epochs, map_after, mapped = daemon(
            broker.bootstrap, src, map_dst, "bench_daemon_throughput:map_only", "out", end, Path(tmp), **knobs)
        assert len(mapped.view) == n and all(c == 1 for c in mapped.view.values()), "wrong map output"
        each_dst = f"bench-each-{uuid.uuid4().hex[:6]}"
        create(broker.bootstrap, each_dst)
        each_s, each_steady, each_cpu, each_epochs, each_after, each = daemon(
            broker.bootstrap, src, each_dst, "bench_daemon_throughput:map_only", "out", end, Path(tmp),
            max_updates=args.max_updates, commit_interval="0s")
        assert len(each.view) == n, "wrong map output (one transaction per epoch)"
    from ddflow.config.dataflows import page_counts

    memory = {"count": in_memory(page_counts, "page_views", n, args.batch), "map": in_memory(map_only, "out", n, args.batch)}
    engine = {"count": engine_only(page_counts, "page_views", n), "map": engine_only(map_only, "out", n)}
    print(f"{n:,} updates in messages of {args.batch}, {epochs:,} epochs of 1 ms, one partition, tansu in memory")
    print(f"  pipe    {n / pipe_s:12,.0f} updates/s")
    runs = (("count", count_s, count_steady, count_cpu, count_epochs, count_after, "count"),
            ("map", map_s, map_steady, map_cpu, map_epochs, map_after, "map"),
            ("map/each", each_s, each_steady, each_cpu, each_epochs, each_after, "map"))
    per_epoch = n / epochs
    for name, total, steady, cpu, published, after, _ in runs:
        rate = after * per_epoch / steady
        print(f"  {name:8s} {n / total:12,.0f} updates/s  daemon/pipe = {pipe_s / total:.3f} from its start; after its "
              f"first commit {rate:,.0f} updates/s = {rate * pipe_s / n:.3f}x the pipe ({published:,} epochs published, "
              f"{after:,} after the first commit in {steady:.2f} s, {cpu:.2f} s CPU: {steady / max(after, 1) * 1000:.2f} "
              f"ms, {cpu / max(after, 1) * 1000:.2f} ms CPU per epoch)")
    print(f"  (map/each: the map flow with kafka.commit_interval = 0, a transaction as soon as the one before "
          f"landed; the others commit every {args.commit_interval}; epoch.max_updates = {args.max_updates:,})")
    for name, (seconds, cpu, count) in memory.items():
        print(f"  {name:8s} the worker over the in-memory source and sink, one epoch per poll: {n / seconds:10,.0f} "
              f"updates/s, {seconds / max(count, 1) * 1000:.2f} ms per epoch ({cpu / max(count, 1) * 1000:.2f} ms CPU)")
    for name, (seconds, cpu, count) in engine.items():
        print(f"  {name:8s} the engine alone (columns in, columns out): {seconds / count * 1000:.2f} ms per epoch "
              f"({cpu / count * 1000:.2f} ms CPU)")
    for name, _, steady, cpu, _, after, flow in runs:  # what an epoch costs beyond the engine's own work
        seconds, engine_cpu, count = engine[flow]
        outside = steady / max(after, 1) - seconds / count
        outside_cpu = cpu / max(after, 1) - engine_cpu / count
        print(f"  {name:8s} per epoch outside the engine (the daemon after its first commit minus the engine "
              f"alone): {outside * 1000:.2f} ms, {outside_cpu * 1000:.2f} ms CPU (target at most 1 ms)")


if __name__ == "__main__":
    main()
