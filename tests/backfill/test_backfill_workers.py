"""Two ``ddflow run`` workers started from one PySpark backfill, on local Spark and the broker.

Each worker loads only the keys it owns (key hash modulo 2) of the snapshot, resumes its input
partitions at the snapshot's offsets, and the two close the epoch up to the frontier F together
(over the mesh, at its default addresses): the result topics hold the output at F, then the live
diffs, equal at every frontier to the engine on the whole history and to one worker started from
the same snapshot. A worker SIGKILLed under the tail is found lost by the other, which exits 1;
restarted without a checkpoint both load their share again and replay their inputs; both stopped,
they write their checkpoints, and started again (still with ``--snapshot-from``) they restore those
instead of the backfill.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from backfill_support import INPUTS, OUTPUTS, counts_matched, history, oracle, tail
from test_backfill import FIELDS, produce, write_archive
from test_backfill_cli import DDFLOW, environment
from test_backfill_cli import config as cli_config

from ddflow.daemon.state.backfill import BackfillInput, run_backfill
from ddflow.daemon.state.checkpoint import CheckpointStore
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.state.snapshot import Snapshot, shard_of
from ddflow.daemon.input.source import InputSpec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

F = 1_000_000
STEP = 100_000


def config(path: Path, bootstrap: str, topics: dict[str, str], checkpoints: Path) -> Path:
    """The backfill tests' config, run by two workers."""
    return cli_config(path, bootstrap, topics, checkpoints,
                      kafka=f'group_id = "{topics["a"]}"\ncommit_interval = "0s"\n',
                      extra='\n[workers]\ncount = 2\nwait_timeout = "120s"\n')


class Workers:
    """``ddflow run --worker-index i --snapshot-from DIR`` for i in 0, 1, their output collected."""

    def __init__(self, cfg: Path, snapshot: Path) -> None:
        self.cfg, self.snapshot = cfg, snapshot
        self.logs: list[list[str]] = [[], []]
        self.processes: list[subprocess.Popen] = [self.start(i) for i in range(2)]

    def start(self, i: int) -> subprocess.Popen:
        p = subprocess.Popen([DDFLOW, "run", "--config", str(self.cfg), "--worker-index", str(i), "--snapshot-from",
                              str(self.snapshot)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**environment(), "PYTHONFAULTHANDLER": "1"})
        lines = self.logs[i]
        lines.append("=== start\n")
        threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
        return p

    def log(self) -> str:
        return "\n".join(f"--- worker {i}\n" + "".join(lines[-200:]) for i, lines in enumerate(self.logs))

    def stacks(self) -> str:
        """The log after the running workers print every thread's stack (SIGABRT, faulthandler)."""
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGABRT)
        time.sleep(2)
        return self.log()

    def stop(self) -> list[int | None]:
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in self.processes:
            try:
                codes.append(p.wait(timeout=120))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
        return codes


def follow(kafka_options, topics, captures, until, views=None, log=lambda: ""):
    """Read each result topic up to ``until``, checking the view at every frontier against the
    engine's; records the views by frontier into ``views`` (output -> frontier -> view)."""
    for out in OUTPUTS:
        with ResultClient(topics[out], kafka_options) as client:
            for change in client.changes(timeout=180):
                if client.view != captures[out].at(change.frontier - 1):
                    pytest.fail(f"{out} at {change.frontier} differs from the engine\n{log()}")
                if views is not None:
                    views.setdefault(out, {})[change.frontier] = client.view
                if change.frontier >= until:
                    break
            if client.frontier < until:
                pytest.fail(f"{out}: frontier {client.frontier}, expected {until}\n{log()}")


def run_to_end(cfg: Path, snapshot: Path, kafka_options, topics, updates, captures, end: int = 0) -> Workers:
    """Two workers started from ``snapshot`` while ``updates`` are produced, followed until the views
    reach the last update's step (or ``end``) equal to ``captures``, then stopped (both exit 0)."""
    workers = Workers(cfg, snapshot)
    try:
        end = max([end, *(produce(kafka_options, topics[n], updates[n], STEP) for n in updates)])
        follow(kafka_options, topics, captures, end, log=workers.stacks)
        assert workers.stop() == [0, 0], workers.log()
    finally:
        workers.stop()
    return workers


def test_two_workers_from_a_spark_backfill_equal_one_worker_and_the_engine(spark, kafka_options, make_topic,
                                                                         tmp_path):
    past = history(21, 20_000, F, keys=2000)
    live = tail(22, F, steps=6, step=STEP, per_step=150, keys=2000)
    first = {n: [u for u in live[n] if u[1] < F + 3 * STEP] for n in INPUTS}
    second = {n: [u for u in live[n] if u[1] >= F + 3 * STEP] for n in INPUTS}
    topics = {n: make_topic(n, partitions=4) for n in INPUTS}
    topics |= {n: make_topic(n, partitions=3) for n in OUTPUTS}
    topics["dlq"] = make_topic("dlq")
    single = {n: make_topic(f"single-{n}", partitions=3) for n in OUTPUTS}
    archives = {n: write_archive(tmp_path / "archive" / n, past[n], files=2) for n in INPUTS}
    # 3 shards for 2 workers: each worker reads every shard and keeps the keys it owns
    result = run_backfill([BackfillInput(n, topics[n], FIELDS, archives[n]) for n in INPUTS], tmp_path / "snapshot",
                          frontier=F, shards=3, spark=spark, progress=lambda _: None)
    snapshot = Snapshot.open(result.path)
    for n in INPUTS:
        whole_base, whole_pending = snapshot.read_input(n)
        shares = [snapshot.read_input(n, owner=(i, 2)) for i in range(2)]
        assert all(shard_of(r, 2) == i for i, (base, _) in enumerate(shares) for r, _ in base)
        assert sorted(shares[0][0] + shares[1][0]) == sorted(whole_base) and min(len(s[0]) for s in shares) > 0
        assert not whole_pending and not shares[0][1] and not shares[1][1]

    end = max(produce(kafka_options, topics[n], first[n], STEP) for n in INPUTS)
    captures = oracle({n: past[n] + live[n] for n in INPUTS})
    cfg = config(tmp_path / "daemon.toml", kafka_options["bootstrap.servers"], topics, tmp_path / "ckpt")
    workers = Workers(cfg, result.path)
    views: dict = {}
    try:
        follow(kafka_options, topics, captures, end, views, workers.stacks)
        assert {min(v) for v in views.values()} == {F}  # the output at F comes first
        assert views["counts"][F] and views["matched"][F]
        # worker 1 killed: worker 0 finds it lost and exits 1. Restarted with worker 1 not given the
        # snapshot, both refuse to start (no checkpoint every worker completed, and they would start
        # from different inputs); both given it, having no checkpoint, they load their shares again
        workers.processes[1].kill()
        workers.processes[1].wait()
        assert workers.processes[0].wait(timeout=120) == 1, workers.log()
        workers.processes[0] = workers.start(0)
        wrong = subprocess.run([DDFLOW, "run", "--config", str(cfg), "--worker-index", "1"], capture_output=True,
                               text=True, env=environment(), timeout=180)
        assert wrong.returncode == 1 and "start every worker with the same --snapshot-from" in wrong.stderr, \
            wrong.stderr[-3000:]
        assert f"snapshot {snapshot.identity}" in wrong.stderr
        assert workers.processes[0].wait(timeout=120) == 1, workers.log()
        workers.processes = [workers.start(i) for i in range(2)]
        end = max(produce(kafka_options, topics[n], second[n], STEP) for n in INPUTS)
        follow(kafka_options, topics, captures, end, views, workers.stacks)
        codes = workers.stop()
        assert codes == [0, 0], workers.log()
    finally:
        workers.stop()
    text = workers.log()
    for i in range(2):
        log = "".join(workers.logs[i])
        assert log.count(f"worker {i} of 2 loads the keys it owns") == 2, text
        assert CheckpointStore(tmp_path / "ckpt" / f"worker-{i}").latest().frontier >= end

    # one worker from the same snapshot, reading the same input topics: the same views
    one = kafka_worker(counts_matched, [InputSpec(n, topics[n], fields=FIELDS) for n in INPUTS],
                       [OutputSpec(n, single[n]) for n in OUTPUTS], kafka_options, group_id=f"single-{topics['a']}",
                       epochs=EpochPolicy(resolution_ns=STEP), snapshot_from=str(result.path))
    one.run(until=end, timeout=300)
    alone: dict = {}
    follow(kafka_options, single, captures, end, alone)
    for out in OUTPUTS:
        common = set(alone[out]) & set(views[out])
        assert F in common and end in common
        assert all(alone[out][f] == views[out][f] for f in common), out

    # restarted with their checkpoints, the workers restore them (the backfill is not loaded again)
    more = tail(23, end, steps=2, step=STEP, per_step=100, keys=2000)
    captures = oracle({n: past[n] + live[n] + more[n] for n in INPUTS})
    again = run_to_end(cfg, result.path, kafka_options, topics, more, captures)
    for i in range(2):
        log = "".join(again.logs[i])
        assert "restoring checkpoint" in log and "loads the keys it owns" not in log, again.log()


def test_a_worker_that_lost_its_checkpoints_has_every_worker_start_again_from_the_snapshot(kafka_options,
                                                                                           make_topic, tmp_path):
    """Worker 0 lost its state (its checkpoint directory is gone): no checkpoint is one every worker
    completed, so worker 1 drops its own and both load their shares of the snapshot again instead
    of starting empty. Every writer drops what it had made final already, and the views equal the
    engine's. (The snapshot is written here, as a backfill would, without Spark.)"""
    import shutil

    from test_backfill import consolidate

    from ddflow.daemon.state.snapshot import SnapshotWriter, columns_for_fields

    past = history(31, 4000, F, keys=500)
    live = tail(32, F, steps=2, step=STEP, per_step=100, keys=500)
    more = tail(33, F + 2 * STEP, steps=2, step=STEP, per_step=100, keys=500)
    topics = {n: make_topic(n, partitions=4) for n in INPUTS}
    topics |= {n: make_topic(n, partitions=3) for n in OUTPUTS}
    topics["dlq"] = make_topic("dlq")
    writer = SnapshotWriter(tmp_path / "snapshot", F, shards=4, origin="backfill")
    for n in INPUTS:
        writer.add_input(n, topics[n], columns_for_fields(FIELDS), consolidate(past[n], F)[0], (),
                         {p: 0 for p in range(4)})
    snapshot = writer.commit()
    cfg = config(tmp_path / "daemon.toml", kafka_options["bootstrap.servers"], topics, tmp_path / "ckpt")
    end = max(produce(kafka_options, topics[n], live[n], STEP) for n in INPUTS)
    captures = oracle({n: past[n] + live[n] + more[n] for n in INPUTS})
    run_to_end(cfg, snapshot, kafka_options, topics, {}, captures, end)
    shutil.rmtree(tmp_path / "ckpt" / "worker-0")  # its checkpoints
    again = run_to_end(cfg, snapshot, kafka_options, topics, more, captures)
    assert "no checkpoint every worker completed" in "".join(again.logs[1]), again.log()
    assert all("loads the keys it owns" in "".join(again.logs[i]) for i in range(2)), again.log()
    assert not any("restoring checkpoint" in "".join(again.logs[i]) for i in range(2)), again.log()
