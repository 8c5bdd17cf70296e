"""Mesh workers agree on the checkpoint they restore (`mesh_member.agree_on_checkpoint`): the newest
frontier every worker holds a valid checkpoint of; a worker whose checkpoint of it is corrupt
refuses it and all choose the one before; without a common one, they must start from the same
inputs. Workers are threads here, agreeing over the engine's in-process transport."""

from __future__ import annotations

import threading

import pytest

from ddflow.daemon.cluster.clock import Decision, EpochClock, decide
from ddflow.daemon.cluster.mesh_member import agree_on_checkpoint
from ddflow.daemon.exceptions import SnapshotError
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.state.checkpoint import CheckpointStore, InputState
from ddflow.daemon.state.snapshot import columns_for_fields
from ddflow.operators.transport import LocalTransport
from ddflow.operators.workers import Worker

COLUMNS = columns_for_fields({"src": "int", "dst": "int"})


def stores(tmp_path, frontiers: list[list[int]]) -> list[CheckpointStore]:
    """Worker i's store holding a checkpoint at each of ``frontiers[i]``."""
    out = []
    for i, mine in enumerate(frontiers):
        store = CheckpointStore(tmp_path / f"worker-{i}", keep=10)
        for f in mine:
            state = InputState([(i, f)], [1])
            store.write(f, [("edges", "edges", COLUMNS, state, {i: f})], extra={"mesh": {"index": i, "workers": 2}})
        out.append(store)
    return out


def together(stores_: list[CheckpointStore], origins=(None, None)) -> list:
    """What each worker's `agree_on_checkpoint` returns (or raises), run side by side."""
    transport = LocalTransport(len(stores_))
    results: list = [None] * len(stores_)

    def one(i: int) -> None:
        worker = Worker(i, len(stores_), transport)
        candidates = {}
        for snapshot in stores_[i].opened():
            candidates.setdefault(snapshot.frontier, snapshot)
        try:
            results[i] = agree_on_checkpoint(worker.agree, candidates, origins[i])
        except SnapshotError as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(stores_))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_the_newest_frontier_every_worker_completed_is_chosen(tmp_path):
    assert together(stores(tmp_path, [[10, 20, 30], [10, 20]])) == [20, 20]


def test_a_corrupt_checkpoint_is_refused_and_all_choose_the_one_before(tmp_path):
    s = stores(tmp_path, [[10, 20, 30], [10, 20]])
    newest = s[1].opened()[0]
    assert newest.frontier == 20
    shard = next(newest.path.rglob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-3] + b"xyz")
    assert together(s) == [10, 10]


def test_without_a_common_checkpoint_the_workers_start_from_the_same_inputs(tmp_path):
    assert together(stores(tmp_path, [[10], [20]])) == [None, None]
    got = together(stores(tmp_path / "other", [[], []]), origins=("backfill-a", None))
    assert all(isinstance(r, SnapshotError) and "start every worker with the same --snapshot-from" in str(r)
               for r in got), got


def test_an_epoch_closing_where_some_worker_said_a_checkpoint_is_due_is_checkpointed_by_all():
    fixed = EpochPolicy(resolution_ns=10)
    due, not_due = EpochClock.vote(57, True, 3, 0.1, checkpoint=True), EpochClock.vote(43, True, 0, 0.0)
    assert decide([due, not_due], 0, fixed).checkpoint and decide([due, not_due], 0, fixed).upper == 40
    assert not decide([not_due, not_due], 0, fixed).checkpoint
    assert not decide([due, EpochClock.vote(None, True, 0, 0.0)], 0, fixed).checkpoint  # no epoch closes
    assert decide([due[:6], not_due[:6]], 0, fixed).checkpoint is False  # votes of a worker without the flag


def test_a_stopping_worker_has_every_worker_checkpoint_the_frontier_they_are_at():
    fixed = EpochPolicy(resolution_ns=10)
    stopping = EpochClock.vote(40, True, 0, 0.0, stopping=True, checkpoint=True)
    assert decide([stopping, EpochClock.vote(43, True, 0, 0.0)], 40, fixed) == Decision(None, (0,), True)
    assert decide([EpochClock.vote(40, True, 0, 0.0, stopping=True)] * 2, 40, fixed) == Decision(None, (0, 1))


def test_mesh_workers_keep_at_least_two_checkpoints(tmp_path):
    """Killed while writing its newest checkpoint, a worker's others still hold the one before it."""
    from ddflow.daemon.cluster.mesh_member import MeshWorker
    from ddflow.daemon.input.source import InputSpec
    from ddflow.daemon.state.recovery import Recovery
    from ddflow.daemon.testing import ListSink, ReplaySource

    sink = ListSink(["reachable"])
    source = ReplaySource([InputSpec("edges", "edges", fields=["src", "dst"])], partitions=2,
                          dead_letters=sink.dead_letters)
    recovery = Recovery(source.inputs, {}, directory=str(tmp_path), keep=1)
    MeshWorker(lambda df, inputs: {}, source, sink, recovery=recovery, index=0, count=2, run="r",
               addresses=(f"ipc://{tmp_path}/w0", f"ipc://{tmp_path}/w1"))
    assert recovery.store.keep == 2
