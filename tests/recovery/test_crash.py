"""A worker with checkpoints SIGKILLed again and again under a stream of updates.

Each incarnation restores the newest valid checkpoint (an interrupted checkpoint write leaves no
checkpoint behind, only a staging directory that is removed), resumes its inputs at the recorded
offsets, and recomputes; the sink does not re-publish times the result topics hold as final. The
result topics must then carry exactly the engine's in-process output over the same inputs: the
same diffs at the same times (none duplicated, none missing) and the same view at every frontier.

The oracle runs first: it compiles the engine's kernels into the on-disk cache, so the workers load
them instead of compiling them in their first epoch (minutes on a loaded machine after a kernel
changed, which used to exceed the waits below: "worker frontier None did not reach 2000").
"""

from __future__ import annotations

import random
import signal
import time

import pytest
from recovery_support import (
    OUTPUTS,
    STEP,
    StepProducer,
    WorkerProcess,
    by_input,
    kill_leftovers,
    make_topics,
    oracle,
    random_stream,
    worker_spec,
)

from ddflow.daemon.kafka.results import ResultClient

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(autouse=True)
def no_leftover_workers():
    yield
    kill_leftovers()


def published(kafka_options, topic, until):
    """Every diff accepted from a result topic, consolidated per (record, time), and the view at
    every frontier move."""
    diffs = {}
    views = []
    with ResultClient(topic, kafka_options) as client:
        for change in client.changes(timeout=60):
            for record, t, diff in change.updates:
                diffs[(record, t)] = diffs.get((record, t), 0) + diff
            views.append((change.frontier, client.view))
            if change.frontier >= until:
                break
    return {k: v for k, v in diffs.items() if v}, views


@pytest.mark.parametrize("commit_interval", [0.0, 0.05])  # a transaction per epoch, or per 50 ms of epochs
def test_sigkill_at_random_points_with_checkpoints(kafka_options, make_topic, tmp_path, commit_interval):
    rng = random.Random(2024)
    steps = 36
    stream = random_stream(21, steps, per_step=40)
    captures = oracle(by_input(stream))  # first: the kernels the workers use are compiled and cached
    topics = make_topics(make_topic)
    spec = worker_spec(kafka_options, topics, worker={
        "checkpoint_dir": str(tmp_path / "checkpoints"), "checkpoint_interval": 0.05, "checkpoint_keep": 2,
        "checkpoint_shards": 3, "commit_interval": commit_interval,
    })
    # where each incarnation dies: inside a checkpoint write (after a shard file, or complete but
    # not renamed), inside an epoch's transaction, or killed from outside at a random moment
    plans = [("external", None), ("die", ["checkpoint_file", 7]), ("die", ["output_batch", 2]),
             ("external", None), ("die", ["checkpoint_rename", 2]), ("external", None), ("die", ["checkpoint_file", 1]),
             ("external", None)]
    producer = StepProducer(kafka_options, topics, stream, steps)
    restored = []
    for kind, die in plans:
        worker = WorkerProcess({**spec, "die": die} if kind == "die" else spec)
        worker.wait_ready()
        restored.append(worker.restored)
        if kind == "die":
            deadline = time.monotonic() + 300
            while worker.proc.poll() is None:  # one step at a time until it reaches its fault
                assert producer.step < steps, f"the worker never reached {die}"
                producer.send_step()
                while worker.proc.poll() is None and (worker.frontier or -1) < producer.step * STEP:
                    assert time.monotonic() < deadline, f"worker stuck at {worker.frontier}: {worker.stderr[-2000:]}"
                    time.sleep(0.01)
        else:
            if producer.step:
                worker.wait_frontier(producer.step * STEP)  # caught up ...
            for _ in range(rng.randint(2, 4)):
                producer.send_step()
            worker.wait_frontier((producer.step - 1) * STEP)
            deadline = time.monotonic() + 300
            while not worker.checkpoints:  # one checkpoint of this incarnation is on disk ...
                assert time.monotonic() < deadline and worker.proc.poll() is None, worker.stderr[-2000:]
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.2))  # ... and it is busy with the new steps, or checkpointing
            worker.kill()
        assert worker.proc.returncode == -signal.SIGKILL, worker.stderr[-2000:]
    assert len(plans) >= 5
    while producer.send_step():
        pass
    producer.close()
    end = steps * STEP
    last = WorkerProcess(spec)
    last.wait_frontier(end)
    assert last.terminate() == 0 and last.exit_frontier == end, last.stderr[-2000:]
    restored.append(last.restored)
    # the incarnations did restore checkpoints (not a replay from the beginning)
    assert restored[0] is None and sum(r is not None for r in restored[1:]) >= len(plans) // 2, restored
    assert restored[-1] is not None and restored[-1] >= max(r for r in restored[:-1] if r is not None), restored
    print("restored frontiers", restored)
    assert not list((tmp_path / "checkpoints").glob(".checkpoint-*.tmp-*")), "staging of a killed write left behind"

    for out in OUTPUTS:
        diffs, views = published(kafka_options, topics[out], end)
        expected = {}
        for record, t, diff in captures[out].updates:
            expected[(record, t)] = expected.get((record, t), 0) + diff
        assert diffs == {k: v for k, v in expected.items() if v}, f"{out}: published diffs differ from the engine's"
        for frontier, view in views:
            assert view == captures[out].at(frontier - 1), f"{out} at frontier {frontier}"
