"""The PySpark backfill on a real local Spark, and a daemon started from its snapshot.

200,000 updates of history in Parquet become a snapshot at frontier F; a worker started with it
(``snapshot_from``) and a live tail on the broker publishes the output at F, then the live diffs,
and its result topics equal, at every frontier, those of a worker that consumed the whole history
from Kafka and the engine's in-process result. Smaller archives check every field type, the shard
of every record, pending updates beyond F, and the errors on bad archives.
"""

from __future__ import annotations

import math
import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from backfill_support import INPUTS, OUTPUTS, counts_matched, history, oracle, tail

from ddflow.daemon.state.backfill import BackfillInput, run_backfill
from ddflow.daemon.exceptions import BackfillError
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.state.snapshot import Snapshot, shard_of
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker

pytestmark = pytest.mark.spark

FIELDS = {"key": "int", "val": "int"}
F = 1_000_000  # the backfill frontier (ns)
STEP = 100_000  # epoch resolution and tail step (ns)


def write_archive(directory, updates, files=3, columns=("key", "val")):
    """An input's history as ``files`` Parquet files: one column per field, time, diff."""
    directory.mkdir(parents=True)
    chunk = math.ceil(len(updates) / files)
    for i in range(files):
        part = updates[i * chunk:(i + 1) * chunk]
        table = {c: [r[j] for r, _, _ in part] for j, c in enumerate(columns)}
        table.update(time=[t for _, t, _ in part], diff=[d for _, _, d in part])
        pq.write_table(pa.table(table), directory / f"part-{i}.parquet")
    return [str(directory)]


def consolidate(updates, frontier):
    base, pending = {}, {}
    for record, t, diff in updates:
        if t < frontier:
            base[record] = base.get(record, 0) + diff
        else:
            pending[(record, t)] = pending.get((record, t), 0) + diff
    return {k: v for k, v in base.items() if v}, {k: v for k, v in pending.items() if v}


def produce(kafka_options, topic, updates, step):
    """Updates sorted by time, with a progress marker at every multiple of ``step``; returns the
    last marker."""
    with UpdateProducer(topic, kafka_options, batch_size=1000) as producer:
        mark = None
        for record, t, diff in sorted(updates, key=lambda u: u[1]):
            boundary = t - t % step
            if mark is None or boundary > mark:
                if mark is not None:
                    producer.advance_to(boundary)
                mark = boundary
            producer.send(record, t, diff)
        end = (mark or 0) + step
        producer.advance_to(end)
    return end


def worker(kafka_options, inputs, outputs, **kwargs):
    return kafka_worker(counts_matched,
                  [InputSpec(n, inputs[n], fields=FIELDS) for n in INPUTS],
                  [OutputSpec(n, outputs[n], max_batch_updates=5000) for n in OUTPUTS],
                  kafka_options, group_id=f"g-{inputs['a']}", epochs=EpochPolicy(resolution_ns=STEP),
                  max_poll_messages=500, **kwargs)


def views(kafka_options, topic, until):
    seen = {}
    with ResultClient(topic, kafka_options) as client:
        for change in client.changes(timeout=120):
            seen[change.frontier] = client.view
            if change.frontier >= until:
                break
    return seen


@pytest.mark.kafka
@pytest.mark.slow
def test_a_daemon_from_the_spark_snapshot_equals_one_that_read_the_whole_history(
        spark, kafka_options, make_topic, tmp_path):
    past = history(1, 200_000, F)
    live = tail(2, F, steps=5, step=STEP, per_step=1000)
    assert sum(map(len, past.values())) == 200_000
    archives = {n: write_archive(tmp_path / "archive" / n, past[n]) for n in INPUTS}
    # the snapshot names the live topics: the worker from the snapshot reads only the tail
    tail_topics = {n: make_topic(f"tail-{n}", partitions=3) for n in INPUTS}
    lines = []
    result = run_backfill([BackfillInput(n, tail_topics[n], FIELDS, archives[n]) for n in INPUTS],
                          tmp_path / "snapshot", frontier=F, shards=4, spark=spark, progress=lines.append,
                          progress_interval=0.2)
    print(f"backfill of 200,000 updates: {result.seconds:.1f} s, {result.updates_per_second:,.0f} updates/s, "
          f"{result.bytes} bytes")
    assert result.updates == {n: len(past[n]) for n in INPUTS}
    assert any("tasks done" in line for line in lines) and any("records at the frontier" in line for line in lines)
    snapshot = Snapshot.open(result.path)
    snapshot.verify()
    for n in INPUTS:
        base, pending = snapshot.read_input(n)
        assert dict(base) == consolidate(past[n], F)[0] and not pending
        assert snapshot.inputs[n].topic == tail_topics[n]

    full_topics = {n: make_topic(f"full-{n}", partitions=3) for n in INPUTS}
    out_snap = {n: make_topic(f"snap-{n}", partitions=2) for n in OUTPUTS}
    out_full = {n: make_topic(f"full-{n}", partitions=2) for n in OUTPUTS}
    end = max(produce(kafka_options, tail_topics[n], live[n], STEP) for n in INPUTS)
    for n in INPUTS:
        produce(kafka_options, full_topics[n], past[n] + live[n], STEP)

    started = time.perf_counter()
    from_snapshot = worker(kafka_options, tail_topics, out_snap, snapshot_from=str(result.path))
    reports = []
    from_snapshot.stats.on_epoch(reports.append)
    from_snapshot.run(until=end, timeout=300)
    print(f"worker from the snapshot reached {end} in {time.perf_counter() - started:.1f} s")
    assert sum(from_snapshot.stats.input(n).updates for n in INPUTS) == sum(map(len, live.values()))
    assert reports[0].upper == F and all(r.lower >= F for r in reports[1:])
    started = time.perf_counter()
    whole = worker(kafka_options, full_topics, out_full)
    whole.run(until=end, timeout=600)
    print(f"worker over the whole history reached {end} in {time.perf_counter() - started:.1f} s")

    captures = oracle({n: past[n] + live[n] for n in INPUTS})
    for out in OUTPUTS:
        snap_views = views(kafka_options, out_snap[out], end)
        full_views = views(kafka_options, out_full[out], end)
        assert min(snap_views) == F  # the output at F comes first
        assert snap_views[F] == captures[out].at(F - 1) and snap_views[F]
        for frontier, view in snap_views.items():
            assert view == captures[out].at(frontier - 1), f"{out} at {frontier}"
            if frontier in full_views:
                assert view == full_views[frontier], f"{out} at {frontier}: the whole-history daemon differs"
        assert snap_views[end] == full_views[end]


def test_every_field_type_round_trips_and_every_record_is_in_its_shard(spark, tmp_path):
    rng = random.Random(3)
    fields = {"k": "str", "x": "float", "blob": "bytes", "flag": "bool", "n": "int", "anything": "any"}
    updates = []
    for i in range(3000):
        record = (f"k{rng.randrange(60)}", rng.choice([0.5, 1.0, -2.25]), bytes([rng.randrange(4)]),
                  rng.random() < 0.5, rng.randrange(-5, 5), rng.choice([1, 2, 3]))
        updates.append((record, rng.randrange(2000), rng.choice([1, -1, 2])))
    columns = tuple(fields)
    archive = write_archive(tmp_path / "typed", updates, files=2, columns=columns)
    untyped = [((r[0], r[4]), t, d) for r, t, d in updates]
    plain = write_archive(tmp_path / "plain", untyped, files=1, columns=("who", "count"))
    result = run_backfill([BackfillInput("typed", "t1", fields, archive, {0: 7}),
                           BackfillInput("plain", "t2", None, plain)],
                          tmp_path / "snap", frontier=1500, shards=5, spark=spark, progress=lambda _: None)
    snapshot = Snapshot.open(result.path)
    assert snapshot.inputs["typed"].offsets == {0: 7} and snapshot.inputs["plain"].offsets is None
    for name, ups in (("typed", updates), ("plain", untyped)):
        base, pending = snapshot.read_input(name)
        expected_base, expected_pending = consolidate(ups, 1500)
        assert dict(base) == expected_base and len(base) == len(expected_base)
        assert {(r, t): d for r, t, d in pending} == expected_pending and pending
        for f in snapshot.inputs[name].base + snapshot.inputs[name].pending:
            shard_base, shard_pending = snapshot.read_input(name, shards=[f.shard])
            assert {shard_of(r, 5) for r, _ in shard_base} | {shard_of(r, 5) for r, _, _ in shard_pending} == {f.shard}
    assert [c.type for c in snapshot.inputs["typed"].columns] == ["string", "float64", "binary", "bool", "int64",
                                                                   "msgpack"]


def bad_archive(path, **columns):
    path.mkdir(parents=True)
    pq.write_table(pa.table(columns), path / "part-0.parquet")
    return [str(path)]


def test_bad_archives_are_refused_naming_the_column(spark, tmp_path):
    def backfill(name, paths, fields=None, **kwargs):
        return run_backfill([BackfillInput("edges", "t", fields or FIELDS, paths)], tmp_path / f"out-{name}",
                            spark=spark, progress=lambda _: None, **kwargs)

    no_diff = bad_archive(tmp_path / "no-diff", key=[1], val=[2], time=[3])
    with pytest.raises(BackfillError, match="the archive has no 'diff' column"):
        backfill("a", no_diff)
    no_field = bad_archive(tmp_path / "no-field", key=[1], time=[3], diff=[1])
    with pytest.raises(BackfillError, match="no column 'val' for the field of that name"):
        backfill("b", no_field)
    wrong = bad_archive(tmp_path / "wrong", key=["x"], val=[2], time=[3], diff=[1])
    with pytest.raises(BackfillError, match="column 'key' is string, but the field is declared int"):
        backfill("c", wrong)
    float_time = bad_archive(tmp_path / "float-time", key=[1], val=[2], time=[3.5], diff=[1])
    with pytest.raises(BackfillError, match="column 'time' is double, not an integer type"):
        backfill("d", float_time)
    nulls = bad_archive(tmp_path / "nulls", key=pa.array([1, None, None], pa.int64()), val=[1, 2, 3],
                        time=[1, 2, 3], diff=[1, 1, 1])
    with pytest.raises(BackfillError, match="2 rows have a null 'key'"):
        backfill("e", nulls)
    (tmp_path / "out-f").mkdir()
    with pytest.raises(BackfillError, match="already exists"):
        backfill("f", no_diff, frontier=10)
    # nothing was left behind: no snapshot, no staging directory
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))) == ["out-f"]
