"""Helpers shared by the recovery tests: the dataflow, its in-process oracle, seeded streams,
producing them step by step, reading result topics back, and worker subprocesses."""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.worker import Worker
from ddflow.operators import Dataflow

INPUTS = ("a", "b")
OUTPUTS = ("joined", "counts", "echo_a")
STEP = 1000  # ns of data time per producer step
RUNNER = Path(__file__).with_name("run_worker.py")


def join_count(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """a(k, v) join b(k, w); per-key counts of a; and a itself."""
    a, b = inputs["a"], inputs["b"]
    return {"joined": a.join(b), "counts": a.map(lambda r: r[0]).count(), "echo_a": a}


def echo(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Input a as it is (its records at the times the worker assigned), and per-key counts."""
    return {"echo_a": inputs["a"], "counts": inputs["a"].map(lambda r: r[0]).count()}


FLOWS = {"join_count": join_count, "echo": echo}


def oracle(updates: Mapping[str, Iterable[tuple[Any, int, int]]], flow: Any = join_count) -> dict[str, Any]:
    """The captures of ``flow`` run in process over every update (input -> (record, time, diff))."""
    df = Dataflow()
    sessions = {name: df.new_input(name) for name in INPUTS}
    captures = {name: c.capture() for name, c in flow(df, {n: s.collection for n, s in sessions.items()}).items()}
    for name, ups in updates.items():
        for record, t, diff in ups:
            sessions[name].update(record, t, diff)
    for s in sessions.values():
        s.close()
    df.run()
    return captures


def random_stream(seed: int, steps: int, per_step: int, keys: int = 8, vals: int = 4) -> list[tuple[Any, ...]]:
    """(input, record, time, diff) sorted by time; step s has times in [s*STEP, (s+1)*STEP)."""
    rng = random.Random(seed)
    out = []
    for step in range(steps):
        for _ in range(per_step):
            out.append((rng.choice(INPUTS), (rng.randrange(keys), rng.randrange(vals)),
                        step * STEP + rng.randrange(STEP), rng.choice([1, 1, 2, -1])))
    return sorted(out, key=lambda u: u[2])


def by_input(stream: Iterable[tuple[str, Any, int, int]]) -> dict[str, list[tuple[Any, int, int]]]:
    updates: dict[str, list[tuple[Any, int, int]]] = {name: [] for name in INPUTS}
    for name, record, t, diff in stream:
        updates[name].append((record, t, diff))
    return updates


def make_topics(make_topic: Any, *, input_partitions: int = 3, output_partitions: int = 2) -> dict[str, str]:
    names = {name: make_topic(name, partitions=input_partitions) for name in INPUTS}
    names.update({name: make_topic(name, partitions=output_partitions) for name in OUTPUTS})
    names["dlq"] = make_topic("dlq")
    return names


class StepProducer:
    """Sends a stream one step of data time at a time, each step closed by progress markers."""

    def __init__(self, kafka_options: Mapping[str, Any], topics: Mapping[str, str], stream: list, steps: int) -> None:
        self.stream = stream
        self.steps = steps
        self.step = 0
        self.producers = {name: UpdateProducer(topics[name], kafka_options, batch_size=4) for name in INPUTS}

    def send_step(self) -> bool:
        if self.step == self.steps:
            return False
        for name, record, t, diff in self.stream:
            if self.step * STEP <= t < (self.step + 1) * STEP:
                self.producers[name].send(record, t, diff)
        self.step += 1
        for p in self.producers.values():
            p.advance_to(self.step * STEP)
            p.flush()
        return True

    def close(self) -> None:
        for p in self.producers.values():
            p.close()


def worker_spec(kafka_options: Mapping[str, Any], topics: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "kafka_options": dict(kafka_options),
        "group_id": f"g-{topics['a']}",
        "inputs": [{"name": n, "topic": topics[n], "fields": {"key": "int", "val": "int"}} for n in INPUTS],
        "outputs": [{"name": n, "topic": topics[n], "max_batch_updates": 20} for n in OUTPUTS],
        "epoch": {"resolution_ns": 100},
        "dead_letter_topic": topics["dlq"],
        "max_poll_messages": 10,
        **extra,
    }


def make_worker(spec: Mapping[str, Any]) -> Worker:
    """A worker in this process from a `worker_spec` (the same the subprocess runner builds)."""
    from ddflow.daemon.input.progress import EpochPolicy

    return kafka_worker(
        FLOWS[spec.get("flow", "join_count")],
        [InputSpec(**i) for i in spec["inputs"]],
        [OutputSpec(**o) for o in spec["outputs"]],
        spec["kafka_options"],
        group_id=spec["group_id"],
        epochs=EpochPolicy(**spec.get("epoch", {})),
        dead_letter_topic=spec.get("dead_letter_topic"),
        max_poll_messages=spec.get("max_poll_messages", 10_000),
        **spec.get("worker", {}),
    )


def views_at_every_frontier(
    kafka_options: Mapping[str, Any], topic: str, until: int, timeout: float = 60
) -> tuple[list, Any]:
    """[(frontier, view)] at every frontier move of a result topic up to ``until``, and the
    client's protocol counters."""
    seen = []
    with ResultClient(topic, kafka_options) as client:
        for change in client.changes(timeout=timeout):
            seen.append((change.frontier, client.view))
            if change.frontier is None or change.frontier >= until:
                break
        assert client.frontier is not None and client.frontier >= until, f"{topic} stuck at {client.frontier}"
    return seen, client.stats


STARTED: list[WorkerProcess] = []


class WorkerProcess:
    """A worker subprocess (run_worker.py); its stdout lines ``ready``, ``restored F``, ``frontier t``,
    ``checkpoint F`` and ``exit t`` are collected. The waits give up after minutes, not seconds: a
    worker's first epoch may compile kernels (slow on a loaded machine), which is not under test."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        STARTED.append(self)
        self.proc = subprocess.Popen([sys.executable, str(RUNNER), json.dumps(spec)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = False
        self.frontier: int | None = None
        self.restored: int | None = None
        self.checkpoints: list[int] = []
        self.exit_frontier: int | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, value = line.strip().partition(" ")
            if kind == "ready":
                self.ready = True
            elif kind == "restored":
                self.restored = None if value == "None" else int(value)
            elif kind == "frontier":
                self.frontier = int(value)
            elif kind == "checkpoint":
                self.checkpoints.append(int(value))
            elif kind == "exit":
                self.exit_frontier = int(value)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            time.sleep(0.2)  # let the stderr reader finish
            raise AssertionError(f"worker exited with {self.proc.returncode}: {self.stderr[-3000:]}")

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            self._alive()
            assert time.monotonic() < deadline, "worker did not open"
            time.sleep(0.01)

    def wait_frontier(self, target: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.frontier is None or self.frontier < target:
            self._alive()
            assert time.monotonic() < deadline, f"worker frontier {self.frontier} did not reach {target}"
            time.sleep(0.01)

    def wait_checkpoint(self, count: int = 1, timeout: float = 300.0) -> None:
        """Until the worker reported ``count`` checkpoints written (renamed into place)."""
        deadline = time.monotonic() + timeout
        while len(self.checkpoints) < count:
            self._alive()
            assert time.monotonic() < deadline, f"worker wrote {len(self.checkpoints)} checkpoints, not {count}"
            time.sleep(0.01)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def kill_leftovers() -> None:
    while STARTED:
        proc = STARTED.pop().proc
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
