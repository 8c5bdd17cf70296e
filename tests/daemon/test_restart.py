"""Worker processes killed with SIGKILL mid-epoch and restarted, and stopped with SIGTERM.

Without checkpoints a restarted worker replays its inputs from the beginning; the sink skips
times the result topics already hold as final and the client drops whatever a killed worker
left behind (aborted transactions stay visible on tansu). The views must be exactly those of
an uninterrupted run, at every frontier.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient
from ddflow.operators.lattice import T_MIN
from flows import INPUTS, OUTPUTS, join_count, oracle
from test_worker import STEP, by_input, make_worker, random_stream

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RUNNER = Path(__file__).with_name("run_worker.py")


STARTED: list[WorkerProcess] = []


@pytest.fixture(autouse=True)
def kill_leftover_workers():
    yield
    while STARTED:
        proc = STARTED.pop().proc
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


class WorkerProcess:
    """A worker subprocess whose stdout lines (``ready``, ``frontier t``, ``exit t``) are collected."""

    def __init__(self, spec: dict) -> None:
        STARTED.append(self)
        self.ready = False
        self.proc = subprocess.Popen(
            [sys.executable, str(RUNNER), json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.frontier: int | None = None
        self.input_frontier: int | None = None
        self.exit_frontier: int | None = None
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, value = line.strip().partition(" ")
            if kind == "ready":
                self.ready = True
            elif kind == "input":
                self.input_frontier = None if value == "None" else int(value)
            elif kind == "frontier":
                self.frontier = int(value)
            elif kind == "exit":
                self.exit_frontier = int(value)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            assert self.proc.poll() is None, f"worker exited with {self.proc.returncode}: {self.stderr[-2000:]}"
            assert time.monotonic() < deadline, "worker did not open"
            time.sleep(0.01)

    def wait_frontier(self, target: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.frontier is None or self.frontier < target:
            assert self.proc.poll() is None, f"worker exited with {self.proc.returncode}: {self.stderr[-2000:]}"
            assert time.monotonic() < deadline, f"worker frontier {self.frontier} did not reach {target}"
            time.sleep(0.01)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def spec_for(kafka_options, topics, group_id):
    return {
        "flow": "join_count",
        "kafka_options": kafka_options,
        "group_id": group_id,
        "inputs": [{"name": n, "topic": topics[n], "fields": ["key", "val"]} for n in INPUTS],
        "outputs": [{"name": n, "topic": topics[n], "max_batch_updates": 20} for n in OUTPUTS],
        "epoch": {"resolution_ns": 100},
        "dead_letter_topic": topics["dlq"],
        "max_poll_messages": 10,
    }


@pytest.fixture
def topics(make_topic):
    names = {name: make_topic(name, partitions=3) for name in INPUTS}
    names.update({name: make_topic(name, partitions=2) for name in OUTPUTS})
    names.update({f"calm_{name}": make_topic(f"calm-{name}", partitions=2) for name in OUTPUTS})
    names["dlq"] = make_topic("dlq")
    return names


def views_at_every_frontier(kafka_options, topic, until):
    """[(frontier, view)] at every frontier move of a result topic up to ``until``, and the
    client's protocol counters."""
    seen = []
    with ResultClient(topic, kafka_options) as client:
        for change in client.changes(timeout=60):
            seen.append((change.frontier, client.view))
            if change.frontier >= until:
                break
        assert client.frontier == until
    return seen, client.stats


def test_sigkill_mid_epoch_and_restart_gives_the_uninterrupted_views(kafka_options, topics):
    rng = random.Random(7)
    steps = 30
    stream = random_stream(8, steps=steps, per_step=40)
    spec = spec_for(kafka_options, topics, f"g-{topics['a']}")
    # three workers kill themselves right after writing an output batch (inside the epoch's
    # transaction, before its markers), two are killed from outside while they work
    plans = [("inject", 2), ("external", 0), ("inject", 1), ("inject", 5), ("external", 0)]
    step = 0
    with UpdateProducer(topics["a"], kafka_options, batch_size=4) as pa, \
            UpdateProducer(topics["b"], kafka_options, batch_size=4) as pb:
        producers = {"a": pa, "b": pb}

        def produce_step() -> None:
            nonlocal step
            if step == steps:
                return
            for name, record, t, diff in stream:
                if step * STEP <= t < (step + 1) * STEP:
                    producers[name].send(record, t, diff)
            step += 1
            pa.advance_to(step * STEP)
            pb.advance_to(step * STEP)
            pa.flush()
            pb.flush()

        for kind, batches in plans:
            if kind == "inject":
                worker = WorkerProcess({**spec, "die_after_batches": batches})
                worker.wait_ready()
                deadline = time.monotonic() + 60
                while worker.proc.poll() is None:  # one step at a time until it hits its fault
                    assert step < steps, "the worker did not reach its fault"
                    produce_step()
                    while worker.proc.poll() is None and (worker.frontier or T_MIN) < step * STEP:
                        assert time.monotonic() < deadline, f"worker stuck at {worker.frontier}"
                        time.sleep(0.01)
            else:
                worker = WorkerProcess(spec)
                worker.wait_ready()
                if step:
                    worker.wait_frontier(step * STEP)  # caught up with the replay ...
                for _ in range(3):
                    produce_step()
                time.sleep(rng.uniform(0.0, 0.1))  # ... and busy with the new steps
                worker.kill()
            assert worker.proc.returncode == -signal.SIGKILL
        while step < steps:
            produce_step()
    end = steps * STEP
    worker = WorkerProcess(spec)
    worker.wait_frontier(end)
    assert worker.terminate() == 0 and worker.exit_frontier == end

    # an uninterrupted run over the same inputs, in process, to other result topics
    calm = {**topics, **{name: topics[f"calm_{name}"] for name in OUTPUTS}}
    uninterrupted = make_worker(kafka_options, calm, max_poll_messages=10)
    uninterrupted.run(until=end, timeout=120)
    captures = oracle(join_count, by_input(stream), INPUTS)
    dropped = 0
    for out in OUTPUTS:
        restarted, stats = views_at_every_frontier(kafka_options, topics[out], end)
        calm_views = dict(views_at_every_frontier(kafka_options, calm[out], end)[0])
        dropped += stats.dropped_updates
        for frontier, view in restarted:
            assert view == captures[out].at(frontier - 1), f"{out} at {frontier}"
            if frontier in calm_views:
                assert view == calm_views[frontier]
        assert restarted[-1][1] == calm_views[end]
    assert dropped > 0  # the killed workers did leave records of unfinished epochs behind


def test_sigterm_publishes_what_is_complete_and_exits_0(kafka_options, topics):
    stream = random_stream(9, steps=6, per_step=30)
    spec = spec_for(kafka_options, topics, f"g-{topics['a']}")
    worker = WorkerProcess(spec)
    with UpdateProducer(topics["a"], kafka_options) as pa, UpdateProducer(topics["b"], kafka_options) as pb:
        producers = {"a": pa, "b": pb}
        for name, record, t, diff in stream:
            producers[name].send(record, t, diff)
        pa.advance_to(6 * STEP)
        pb.advance_to(6 * STEP)
        worker.wait_frontier(6 * STEP)
        # one more update and a promise between two epoch boundaries (the resolution is 100 ns)
        pa.insert((1, 1), 6 * STEP + 5)
        stream.append(("a", (1, 1), 6 * STEP + 5, 1))
        pa.advance_to(6 * STEP + 17)
        pb.advance_to(6 * STEP + 17)
        pa.flush()
        pb.flush()
    deadline = time.monotonic() + 30
    while worker.input_frontier != 6 * STEP + 17:
        assert time.monotonic() < deadline, f"input frontier {worker.input_frontier}"
        time.sleep(0.01)
    assert worker.frontier == 6 * STEP  # the epoch [6000, 6100) is not closed ...
    assert worker.terminate() == 0, worker.stderr[-2000:]
    assert worker.exit_frontier == 6 * STEP + 17  # ... but stopping publishes every complete time
    captures = oracle(join_count, by_input(stream), INPUTS)
    with ResultClient(topics["joined"], kafka_options) as client:
        assert client.wait_for(6 * STEP + 17, timeout=30)
        client.catch_up()
        assert client.frontier == 6 * STEP + 17 and client.view == captures["joined"].at(6 * STEP + 16)
