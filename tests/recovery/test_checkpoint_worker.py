"""Checkpoints and snapshots through a worker on the real broker (in process).

A worker writes checkpoints at epoch boundaries; a new worker on the same directory restores the
newest valid one, resumes its inputs at the recorded offsets (it does not read the history again)
and its result topics still show exactly the engine's in-process views. Torn or corrupt
checkpoints are refused and the one before is used; snapshots whose offsets the broker does not
hold, or that do not fit the inputs, are refused with errors that say why.
"""

from __future__ import annotations

import threading

import pytest
from recovery_support import (
    INPUTS,
    OUTPUTS,
    STEP,
    StepProducer,
    by_input,
    make_topics,
    make_worker,
    oracle,
    random_stream,
    views_at_every_frontier,
    worker_spec,
)

from ddflow.daemon.state.checkpoint import CheckpointStore
from ddflow.daemon.exceptions import RecoveryError, SnapshotError
from ddflow.daemon.state.snapshot import MANIFEST, Snapshot, SnapshotWriter, columns_for_fields

pytestmark = pytest.mark.kafka

FIELDS = {"key": "int", "val": "int"}


@pytest.fixture
def topics(make_topic):
    return make_topics(make_topic)


def spec_with(kafka_options, topics, directory, **worker):
    return worker_spec(kafka_options, topics, worker={"checkpoint_dir": str(directory), **worker})


def assert_views_equal_engine(kafka_options, topics, stream, until, *, after=None):
    captures = oracle(by_input(stream))
    for out in OUTPUTS:
        seen, _ = views_at_every_frontier(kafka_options, topics[out], until)
        assert seen and seen[-1][0] == until
        for frontier, view in seen:
            if after is None or frontier >= after:
                assert view == captures[out].at(frontier - 1), f"{out} at frontier {frontier}"


def run_first_half(kafka_options, topics, tmp_path, stream, steps):
    """Half of the steps, the worker catching up with each and writing a checkpoint there (and in
    the background after every epoch when none is being written)."""
    producer = StepProducer(kafka_options, topics, stream, steps)
    first = make_worker(spec_with(kafka_options, topics, tmp_path, checkpoint_interval=1e-9, checkpoint_keep=3))
    first.open()
    for step in range(1, steps // 2 + 1):
        producer.send_step()
        first.run(until=step * STEP, timeout=120)
        first.recovery.finish()  # the one being written in the background, if any
        if first.recovery.last_frontier != first.frontier:
            first.recovery.checkpoint(first.frontier, first.source.next_offsets())
    first.close()
    return producer, first


def test_restore_resumes_at_the_recorded_offsets(kafka_options, topics, tmp_path):
    steps = 12
    stream = random_stream(11, steps, per_step=40)
    producer, first = run_first_half(kafka_options, topics, tmp_path, stream, steps)
    half = (steps // 2) * STEP
    store = CheckpointStore(tmp_path)
    assert len(store.checkpoints()) == 3  # one per epoch, the newest 3 kept
    assert len(first.recovery.written) >= steps // 2
    assert Snapshot.open(store.checkpoints()[-1]).frontier == half
    while producer.send_step():
        pass
    producer.close()
    second = make_worker(spec_with(kafka_options, topics, tmp_path))
    snapshots = []  # which epochs the sink is told publish the restored snapshot (debezium: r events)
    publish = second.sink.publish
    second.sink.publish = lambda *a, **k: (snapshots.append(k.get("snapshot", False)), publish(*a, **k))[1]
    second.open()
    assert second.recovery.restored.frontier == half and second.loading
    second.run(until=steps * STEP, timeout=120)
    second.close()
    assert snapshots[0] is True and not any(snapshots[1:]) and len(snapshots) > 1
    # the second worker read only what came after the checkpoint's offsets
    later = sum(1 for _, _, t, _ in stream if t >= half)
    assert sum(second.stats.input(n).updates for n in INPUTS) == later
    # the output at the checkpoint's frontier was already on the result topics: suppressed
    assert second.stats.output("joined").suppressed_updates > 0
    assert_views_equal_engine(kafka_options, topics, stream, steps * STEP)


def corrupt_parquet_byte(path):
    target = sorted(path.glob("input-*/base-*.parquet"))[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    return "differs from the manifest"


def truncate_parquet(path):
    target = sorted(path.glob("input-*/base-*.parquet"))[0]
    target.write_bytes(target.read_bytes()[:-7])
    return "torn or truncated"


def delete_parquet(path):
    sorted(path.glob("input-*/base-*.parquet"))[-1].unlink()
    return "the file is missing"


def tear_manifest(path):
    manifest = path / MANIFEST
    manifest.write_text(manifest.read_text()[:200])
    return "not valid JSON"


def edit_manifest(path):
    manifest = path / MANIFEST
    manifest.write_text(manifest.read_text().replace('"frontier": ', '"frontier": 1'))
    return "checksum"


def delete_manifest(path):
    (path / MANIFEST).unlink()
    return "no MANIFEST.json"


@pytest.mark.parametrize("damage", [corrupt_parquet_byte, truncate_parquet, delete_parquet, tear_manifest,
                                    edit_manifest, delete_manifest])
def test_a_damaged_newest_checkpoint_is_refused_and_the_previous_one_used(kafka_options, topics, tmp_path, damage):
    steps = 8
    stream = random_stream(12, steps, per_step=30)
    producer, first = run_first_half(kafka_options, topics, tmp_path, stream, steps)
    store = CheckpointStore(tmp_path)
    newest, previous = store.checkpoints()[-1], store.checkpoints()[-2]
    reason = damage(newest)
    previous_frontier = Snapshot.open(previous).frontier
    while producer.send_step():
        pass
    producer.close()
    second = make_worker(spec_with(kafka_options, topics, tmp_path))
    second.open()
    refused = second.recovery.store.refused
    assert [p for p, _ in refused] == [newest] and reason in refused[0][1], refused
    assert second.recovery.restored.frontier == previous_frontier < (steps // 2) * STEP
    second.run(until=steps * STEP, timeout=120)
    second.close()
    assert_views_equal_engine(kafka_options, topics, stream, steps * STEP)


def write_snapshot(path, topics, frontier, *, base=None, offsets=None, topic_of=None, fields=FIELDS):
    """A snapshot for the test inputs written directly (as a backfill would)."""
    writer = SnapshotWriter(path, frontier, shards=3, origin="backfill")
    for name in INPUTS:
        writer.add_input(name, (topic_of or topics)[name], columns_for_fields(fields), (base or {}).get(name, {}),
                         offsets=(offsets or {}).get(name))
    return writer.commit()


def test_offsets_the_broker_does_not_hold_are_refused(kafka_options, topics, tmp_path, monkeypatch):
    producer = StepProducer(kafka_options, topics, random_stream(13, 2, per_step=30), 2)
    while producer.send_step():
        pass
    producer.close()
    # resuming at offset 500 of a partition that holds a few dozen messages: a recreated topic. The
    # embedded broker answers a read there with silence, which the check takes as the end only after
    # its timeout (10 s); 1 s here, as every answer and the silence both refuse the offset
    from functools import partial

    import ddflow.daemon.state.recovery as recovery

    beyond = write_snapshot(tmp_path / "beyond", topics, 5000, offsets={"a": {0: 1, 1: 500, 2: 0}})
    worker = make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(beyond)}))
    with monkeypatch.context() as patch, \
            pytest.raises(RecoveryError, match=rf"resuming {topics['a']}\[1\] at offset 500: .*recreated"):
        patch.setattr(recovery, "check_offsets", partial(recovery.check_offsets, timeout=1.0))
        worker.open()
    # a partition the topic no longer has
    gone = write_snapshot(tmp_path / "gone", topics, 5000, offsets={"b": {0: 0, 1: 0, 2: 0, 3: 4}})
    worker = make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(gone)}))
    with pytest.raises(RecoveryError,
                       match=rf"resuming {topics['b']}\[3\] at offset 4: the topic now has 3 partitions"):
        worker.open()
    # offsets the broker holds are fine (offset 2 of a partition that has messages)
    fine = write_snapshot(tmp_path / "fine", topics, 5000, offsets={"a": {0: 1}})
    worker = make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(fine)}))
    worker.open()
    worker.close()


def test_snapshots_that_do_not_fit_the_inputs_are_refused(kafka_options, topics, tmp_path):
    other = dict(topics, a="some-other-topic")
    wrong_topic = write_snapshot(tmp_path / "topic", topics, 5000, topic_of=other)
    with pytest.raises(SnapshotError, match="input 'a' was read from topic 'some-other-topic'"):
        make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(wrong_topic)})).open()
    wrong_fields = write_snapshot(tmp_path / "fields", topics, 5000, fields={"key": "int", "val": "str"})
    with pytest.raises(SnapshotError, match=r"input 'a' has columns \(key:int64, val:string\), the worker's fields "
                                            r"give \(key:int64, val:int64\)"):
        make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(wrong_fields)})).open()
    # a snapshot named with --snapshot-from must be valid: no fallback, a clear error
    damaged = write_snapshot(tmp_path / "damaged", topics, 5000, base={"a": {(1, 2): 3}})
    corrupt_parquet_byte(damaged)
    with pytest.raises(SnapshotError, match=r"damaged: input-0/base-\d+\.parquet: sha256 .* differs"):
        make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(damaged)})).open()
    with pytest.raises(SnapshotError, match="no such directory"):
        make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(tmp_path / "nope")})).open()


def test_snapshot_from_holds_the_frontier_while_loading_then_publishes_the_output_at_f(
        kafka_options, topics, tmp_path, monkeypatch):
    steps = 10
    stream = random_stream(14, steps, per_step=40)
    frontier = 4 * STEP
    history = by_input(u for u in stream if u[2] < frontier)
    base = {}
    for name, ups in history.items():
        acc = {}
        for record, _, diff in ups:
            acc[record] = acc.get(record, 0) + diff
        base[name] = acc
    path = write_snapshot(tmp_path / "backfill", topics, frontier, base=base)
    # the live tail holds only updates at or after the frontier
    tail = [u for u in stream if u[2] >= frontier]
    release = threading.Event()
    read_blocks = Snapshot.read_blocks

    def slow_read_blocks(self, name, **kwargs):
        release.wait(60)
        return read_blocks(self, name, **kwargs)

    monkeypatch.setattr(Snapshot, "read_blocks", slow_read_blocks)
    worker = make_worker(worker_spec(kafka_options, topics, worker={"snapshot_from": str(path)}))
    reports = []
    worker.stats.on_epoch(reports.append)
    worker.open()
    producer = StepProducer(kafka_options, topics, tail, steps)
    producer.step = frontier // STEP
    while producer.send_step():
        pass
    producer.close()
    for _ in range(400):  # the live tail is consumed at once, but nothing is published
        worker.step()
        if sum(worker.stats.input(n).updates for n in INPUTS) == len(tail):
            break
    assert sum(worker.stats.input(n).updates for n in INPUTS) == len(tail)
    assert worker.loading and worker.frontier < frontier and not reports
    release.set()
    worker.run(until=steps * STEP, timeout=120)
    worker.close()
    assert reports[0].upper == frontier and reports[0].lower < frontier  # the output at F first ...
    assert all(r.lower >= frontier for r in reports[1:])  # ... then the live diffs
    captures = oracle(by_input(stream))
    for out in OUTPUTS:
        seen, _ = views_at_every_frontier(kafka_options, topics[out], steps * STEP)
        assert seen[0][0] == frontier
        for f, view in seen:
            assert view == captures[out].at(f - 1), f"{out} at {f}"
