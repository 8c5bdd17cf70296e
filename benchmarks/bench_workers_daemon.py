"""``bench_workers.py --daemon``: the workloads through ``ddflow run`` with 1, 2 and 4 worker processes
(see bench_workers' docstring). Not a script of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
from bench_reachability import workload
from result_markers import committed_markers, marker_consumer

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.client import ensure_topics
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

DDFLOW = str(Path(sys.executable).parent / "ddflow")
PAGES = 1000
RESULT_PARTITIONS = 2
US = 1000  # ns between two views
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread of a process: its name (the OS's: Python threads show the process's name, the
    Kafka client's and ZeroMQ's native threads their own) and user + system CPU seconds so far."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            head, rest = (task / "stat").read_text().rsplit(")", 1)
        except OSError:  # ended meanwhile
            continue
        fields = rest.split()
        out[int(task.name)] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / TICK)
    return out


def busiest_threads(before: dict, after: dict, top: int = 4) -> str:
    """The ``top`` threads by CPU between two `thread_seconds` readings, as ``name cpu`` pairs."""
    spent = sorted(((cpu - before.get(tid, ("", 0.0))[1], name) for tid, (name, cpu) in after.items()), reverse=True)
    return ", ".join(f"{name} {cpu:.2f}" for cpu, name in spent[:top] if cpu > 0)


def config(path: Path, bootstrap: str, group: str, flow: str, source: str, results: str, workers: int,
           resolution_ns: int, roots: int, max_updates: int | None = None) -> Path:
    function, name, fields, output = {
        "count": ("page_counts", "views", '{ user = "int", page = "int" }', "page_views"),
        "reach": ("reachability", "edges", '{ src = "int", dst = "int" }', "reachable"),
    }[flow]
    args = f"args = {{ roots = {list(range(roots))} }}" if flow == "reach" else ""
    path.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:{function}"
{args}

[kafka]
bootstrap = "{bootstrap}"
group_id = "{group}"

[[inputs]]
name = "{name}"
topic = "{source}"
fields = {fields}

[[outputs]]
name = "{output}"
topic = "{results}"

[epoch]
resolution = "{resolution_ns}ns"
{"" if max_updates is None else f"max_updates = {max_updates}"}

[dead_letter]
topic = "{source}-dead"

[metrics]
address = "127.0.0.1:0"

[workers]
count = {workers}
""")
    return path


class Run:
    """``workers`` ``ddflow run`` processes, their logs collected."""

    def __init__(self, path: Path, workers: int) -> None:
        self.logs: list[list[str]] = [[] for _ in range(workers)]
        self.procs = [subprocess.Popen([DDFLOW, "run", "--config", str(path), "--worker-index", str(i)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                      for i in range(workers)]
        for i, p in enumerate(self.procs):
            threading.Thread(target=lambda p=p, i=i: self.logs[i].extend(p.stderr), daemon=True).start()

    def wait_open(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not all(any("worker open" in line for line in log) for log in self.logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise SystemExit("a worker did not open:\n" + "".join(line for log in self.logs for line in log[-20:]))
            time.sleep(0.01)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            if p.wait(120) != 0:
                raise SystemExit("a worker failed:\n" + "".join(line for log in self.logs for line in log[-20:]))

    def exchange(self) -> list[tuple[int, float, int, float]]:
        """Per worker (steps, mean wait per step in us, updates received, p99 wait per step in us) from
        its log at exit."""
        out = []
        for log in self.logs:
            m = re.search(r"(\d+) exchange steps, mean wait (\d+) us per step \(p99 (\d+) us\), (\d+) updates sent "
                          r"and (\d+) received", "".join(log))
            if m:
                out.append((int(m.group(1)), float(m.group(2)), int(m.group(5)), float(m.group(3))))
        return out


def watch_end(bootstrap: str, topic: str, partitions: int, end: int, workers: int, run: Run,
              timeout: float = 3600) -> None:
    """Wait until every writer's progress marker reaching ``end`` is committed on every partition of
    ``topic``, watched by `result_markers` (the batches of updates left undecoded)."""
    c = marker_consumer(bootstrap, topic, partitions)
    waiting = {(p, w) for p in range(partitions) for w in range(workers)}
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline or any(p.poll() is not None for p in run.procs):
                raise SystemExit(f"the output did not reach {end} on {topic}: still waiting for (partition, "
                                 f"writer) {sorted(waiting)}:\n" + "".join(line for log in run.logs for line in log[-20:]))
            for partition, marker in committed_markers(c):
                if marker.upper is None or marker.upper >= end:
                    waiting.discard((partition, marker.writer))
    finally:
        c.close()


def measure(options, broker, flow, source, end, workers, resolution_ns, roots,
            max_updates: int | None = None) -> tuple[float, list, float, dict, list, list]:
    """Seconds from every worker open to the output complete at ``end`` (watched by its markers), CPU
    seconds per worker process and of the broker in that time, the final view (read after, untimed),
    the exchange figures and each worker's busiest threads."""
    bootstrap = broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    results = f"bench-out-{tag}"
    ensure_topics(options, {results: RESULT_PARTITIONS, f"{source}-dead": 1})
    with tempfile.TemporaryDirectory() as tmp:
        path = config(Path(tmp) / "daemon.toml", bootstrap, f"bench-{tag}", flow, source, results, workers,
                      resolution_ns, roots, max_updates)
        run = Run(path, workers)
        try:
            run.wait_open()
            started = time.perf_counter()
            cpu0, broker0 = [cpu_seconds(p.pid) for p in run.procs], cpu_seconds(broker.pid)
            threads0 = [thread_seconds(p.pid) for p in run.procs]
            watch_end(bootstrap, results, RESULT_PARTITIONS, end, workers, run)
            seconds = time.perf_counter() - started
            cpu = [cpu_seconds(p.pid) - c for p, c in zip(run.procs, cpu0)]
            broker_cpu = cpu_seconds(broker.pid) - broker0
            threads = [busiest_threads(t, thread_seconds(p.pid)) for p, t in zip(run.procs, threads0)]
        finally:
            run.stop()
    with ResultClient(results, options) as client:
        if not client.wait_for(end, timeout=600):
            raise SystemExit(f"{flow}: the result client did not reach {end}")
        view = client.view
    return seconds, cpu, broker_cpu, view, run.exchange(), threads


def report(label: str, workers: int, rate: float, base: float | None, cpu: list, broker: float, seconds: float,
           exchange: list, threads: list[str], show_threads: bool) -> None:
    ratio = "" if base is None else f" (ratio {rate / base:.2f})"
    line = (f"  {label} {workers} worker(s): {rate:9.0f}/s{ratio}; CPU s per process {[round(c, 1) for c in cpu]}, "
            f"broker {broker:.1f} s CPU in {seconds:.1f} s")
    if exchange:
        steps = sum(e[0] for e in exchange) / len(exchange)
        wait = sum(e[0] * e[1] for e in exchange) / max(1, sum(e[0] for e in exchange))
        line += (f"; {steps:.0f} exchange steps per worker, mean wait {wait:.0f} us per step (p99 of the "
                 f"slowest worker {max(e[3] for e in exchange):.0f} us), {sum(e[2] for e in exchange)} updates "
                 "crossed workers")
    print(line, flush=True)
    if show_threads:
        for i, busiest in enumerate(threads):
            print(f"    worker {i}'s busiest threads (CPU s): {busiest}", flush=True)


def daemon_mode(args) -> None:
    counts = [int(w) for w in args.workers.split(",") if w]
    with EmbeddedBroker() as broker:
        options = {"bootstrap.servers": broker.bootstrap}
        print(f"through ddflow run on an embedded broker ({broker.bootstrap}); time from every worker open to "
              "the final output frontier", flush=True)
        if "count" not in args.skip:
            source = f"bench-views-{uuid.uuid4().hex[:6]}"
            ensure_topics(options, {source: 4})
            rng = np.random.default_rng(1)
            pages = rng.integers(0, PAGES, args.updates)
            with UpdateProducer(source, options, batch_size=1000) as producer:
                for i, page in enumerate(pages.tolist()):
                    producer.send((i, page), i * US, 1)
                    if (i + 1) % 1000 == 0:
                        producer.advance_to((i + 1) * US)
                end = args.updates * US
                producer.advance_to(end)
            want = Counter(pages.tolist())
            print(f"count-per-page: {args.updates} views, 1 ms epochs", flush=True)
            base = None
            for workers in counts:
                seconds, cpu, broker_cpu, view, exchange, threads = measure(options, broker, "count", source, end, workers,
                                                                   1_000_000, 0, args.max_updates)
                if view != {(p, n): 1 for p, n in want.items()}:
                    raise SystemExit(f"count-per-page with {workers} workers: wrong counts")
                rate = args.updates / seconds
                report("count-per-page", workers, rate, base, cpu, broker_cpu, seconds, exchange, threads,
                       args.threads)
                base = base or rate
        if "reach" not in args.skip:
            m, c, e = args.edges, args.changes, args.epoch
            graph = workload(args.nodes, m, c)
            source = f"bench-edges-{uuid.uuid4().hex[:6]}"
            ensure_topics(options, {source: 4})
            with UpdateProducer(source, options, batch_size=1000) as producer:
                for s, d in graph[:m].tolist():
                    producer.send((s, d), 0, 1)
                producer.advance_to(e)
                for k in range(c):
                    producer.send(tuple(graph[k].tolist()), e + k, -1)
                    producer.send(tuple(graph[m + k].tolist()), e + k, 1)
                    if (k + 1) % e == 0:
                        producer.advance_to(e + k + 1)
                end = e + c
                producer.advance_to(end)
            print(f"reachability {args.nodes} nodes / {m} edges / {args.roots} roots, {c} changes, E={e}", flush=True)
            base, first = None, None
            for workers in counts:
                seconds, cpu, broker_cpu, view, exchange, threads = measure(options, broker, "reach", source, end, workers,
                                                                   e, args.roots, args.max_updates)
                if first is not None and view != first:
                    raise SystemExit(f"reachability with {workers} workers differs from {counts[0]} worker(s)")
                first = view
                rate = c / seconds
                report("reachability", workers, rate, base, cpu, broker_cpu, seconds, exchange, threads,
                       args.threads)
                base = base or rate
