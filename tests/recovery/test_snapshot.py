"""The snapshot format without a broker: round trips of every column type, the shard of every
record, atomic writes, checkpoint stores (keep N, newest valid first), and damage detection."""

from __future__ import annotations

import json
import random

import pytest

from ddflow.daemon.state.checkpoint import CheckpointStore, InputState
from ddflow.daemon.exceptions import OptionsError, SnapshotError
from ddflow.daemon.state.snapshot import MANIFEST, Snapshot, SnapshotWriter, columns_for_fields, shard_of

TYPED = {"k": "str", "x": "float", "blob": "bytes", "flag": "bool", "n": "int", "anything": "any"}


def typed_records(rng, count):
    anything = [1, 2.5, "s", b"b", None, True, (1, (2, "x")), -(2**62)]
    return [(f"k{rng.randrange(50)}", rng.choice([0.5, -1.0, 3.25]), bytes([rng.randrange(3)]), rng.random() < 0.5,
             rng.randrange(-3, 3), rng.choice(anything)) for _ in range(count)]


def test_every_column_type_round_trips_and_records_land_in_their_shard(tmp_path):
    rng = random.Random(1)
    typed = {r: rng.choice([1, -2, 3]) for r in typed_records(rng, 400)}
    untyped = {(i, ("nested", i % 3), None): 1 for i in range(50)}
    pending = [(r, 100 + rng.randrange(50), rng.choice([1, -1])) for r in list(typed)[:60]]
    writer = SnapshotWriter(tmp_path / "s", 100, shards=7, origin="checkpoint")
    writer.add_input("typed", "t1", columns_for_fields(TYPED), typed, pending, {0: 4, 2: 9})
    writer.add_input("untyped", "t2", columns_for_fields(None), untyped)
    snapshot = Snapshot.open(writer.commit())
    snapshot.verify()
    base, got_pending = snapshot.read_input("typed")
    assert dict(base) == typed and len(base) == len(typed)
    expected_pending = {}
    for r, t, d in pending:
        expected_pending[(r, t)] = expected_pending.get((r, t), 0) + d
    assert {(r, t): d for r, t, d in got_pending} == {k: v for k, v in expected_pending.items() if v}
    assert dict(snapshot.read_input("untyped")[0]) == untyped
    assert snapshot.inputs["typed"].offsets == {0: 4, 2: 9} and snapshot.inputs["untyped"].pending == ()
    for entry in snapshot.inputs.values():
        for f in entry.base + entry.pending:
            shard_base, shard_pending = snapshot.read_input(entry.name, shards=[f.shard])
            assert {shard_of(r, 7) for r, _ in shard_base} | {shard_of(r, 7) for r, _, _ in shard_pending} == {f.shard}
    assert shard_of((5, "x"), 7) == shard_of((5, "y"), 7)  # the key is the first field


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    with pytest.raises(SnapshotError, match="pending update at time 5 is below the frontier 10"):
        with SnapshotWriter(tmp_path / "s", 10, shards=2, origin="checkpoint") as writer:
            writer.add_input("a", "t", columns_for_fields(["k"]), {(1,): 1}, [((2,), 5, 1)])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SnapshotError, match="encoding column 'k' as int64"):
        with SnapshotWriter(tmp_path / "s", 10, shards=2, origin="checkpoint") as writer:
            writer.add_input("a", "t", columns_for_fields({"k": "int"}), {("not an int",): 1})
    assert list(tmp_path.iterdir()) == []


def test_store_keeps_the_newest_and_cleans_interrupted_writes(tmp_path):
    (tmp_path / ".checkpoint-0000000009.tmp-dead").mkdir()  # a write a crash interrupted
    store = CheckpointStore(tmp_path, keep=2, shards=2)
    assert not list(tmp_path.glob(".checkpoint-*"))
    for i in range(1, 5):
        state = InputState.of({(j,): 1 for j in range(1, i + 1)}, [((j,), j * 10 + 100, 1) for j in range(1, i + 1)])
        store.write(i * 10 + 1, [("a", "t", columns_for_fields(["k"]), state, {0: i})])
    assert [p.name for p in store.checkpoints()] == ["checkpoint-0000000003", "checkpoint-0000000004"]
    latest = store.latest()
    assert latest.frontier == 41 and dict(latest.read_input("a")[0]) == {(1,): 1, (2,): 1, (3,): 1, (4,): 1}
    assert sorted(latest.read_input("a")[1]) == [((i,), i * 10 + 100, 1) for i in range(1, 5)]
    assert store.oldest_offsets() == {"t": {0: 3}}
    with pytest.raises(OptionsError, match="checkpoint keep: expected an int >= 1, got 0"):
        CheckpointStore(tmp_path, keep=0)


def test_input_state_holds_records_once_with_non_zero_counts():
    state = InputState.of({"a": 0, "b": 2, "c": -1}, [("d", 9, 1)])
    assert state.records == ["b", "c"] and state.counts.tolist() == [2, -1] and state.base == {"b": 2, "c": -1}
    assert state.pending == [("d", 9, 1)] and len(state) == 2
    with pytest.raises(OptionsError, match="2 records, 1 counts"):
        InputState(["a", "b"], [1])


def damaged_snapshot(tmp_path, damage):
    writer = SnapshotWriter(tmp_path / "s", 50, shards=2, origin="checkpoint")
    writer.add_input("a", "t", columns_for_fields({"k": "int", "v": "str"}), {(i, "v"): 1 for i in range(100)})
    path = writer.commit()
    damage(path)
    return path


def flip(path):
    f = sorted(path.glob("input-0/*.parquet"))[0]
    data = bytearray(f.read_bytes())
    data[40] ^= 1
    f.write_bytes(bytes(data))


def manifest_claims(path, key, value):
    body = json.loads((path / MANIFEST).read_text())
    body["inputs"]["a"]["base"][0][key] = value
    (path / MANIFEST).write_text(json.dumps(body))


@pytest.mark.parametrize("damage,message", [
    (flip, r"input-0/base-0000\d.parquet: sha256 .* differs from the manifest's"),
    (lambda p: sorted(p.glob("input-0/*.parquet"))[0].write_bytes(b"PAR1"), r"4 bytes, the manifest says \d+"),
    (lambda p: sorted(p.glob("input-0/*.parquet"))[0].unlink(), "the file is missing"),
    (lambda p: (p / MANIFEST).write_text((p / MANIFEST).read_text()[:-40]), "not valid JSON, the manifest is torn"),
    (lambda p: manifest_claims(p, "rows", 3), "checksum .* does not match the content"),
    (lambda p: (p / MANIFEST).unlink(), "no MANIFEST.json"),
    (lambda p: (p / MANIFEST).write_text('{"format": "something/9"}'), "format 'something/9' is not"),
])
def test_damage_is_detected_with_a_message_that_says_what(tmp_path, damage, message):
    path = damaged_snapshot(tmp_path, damage)
    with pytest.raises(SnapshotError, match=message):
        snapshot = Snapshot.open(path)
        snapshot.verify()
        snapshot.read_input("a")


def test_refused_checkpoints_do_not_count_against_keep(tmp_path):
    """Three rounds of: the newest checkpoint is corrupted, a restart refuses it and restores an
    older one, then writes a new one. Pruning must keep the newest valid checkpoint each time, so a
    fourth corruption still leaves one to restore (counting refused ones against ``keep`` once
    left only corrupt checkpoints, and the daemon replayed from offset 0)."""
    frontier = 0

    def write(store):
        nonlocal frontier
        frontier += 10
        state = InputState.of({(f,): 1 for f in range(10, frontier + 1, 10)})
        return store.write(frontier, [("a", "t", columns_for_fields(["k"]), state, {0: frontier})])

    store = CheckpointStore(tmp_path, keep=3, shards=1)
    for _ in range(3):
        write(store)
    restorable = []
    for _ in range(3):
        flip(store.checkpoints()[-1])  # the newest one is corrupted on disk
        store = CheckpointStore(tmp_path, keep=3, shards=1)  # a restart
        restored = store.latest()
        assert restored is not None, [p.name for p in store.checkpoints()]
        restorable.append(restored.frontier)
        write(store)
    flip(store.checkpoints()[-1])
    store = CheckpointStore(tmp_path, keep=3, shards=1)
    restored = store.latest()
    assert restored is not None and restored.frontier == restorable[-1] == 20, restorable
    # refused checkpoints stay (for inspection) until `keep` newer valid ones exist, then go
    refused = {r for r, _ in store.refused}
    assert len(refused) == 4 and [p.name for p in store.checkpoints() if p not in refused] == [
        "checkpoint-0000000001", "checkpoint-0000000002"]
    for _ in range(3):
        write(store)
    assert [p.name for p in store.checkpoints()] == [f"checkpoint-{i:010d}" for i in (7, 8, 9)]


def test_a_snapshot_sharded_by_the_old_hash_is_read_whole_and_refused_by_shard(tmp_path):
    from ddflow.daemon.state.manifest import _checksum

    records = {(i, "v"): 1 for i in range(40)}
    writer = SnapshotWriter(tmp_path / "s", 100, shards=4, origin="checkpoint")
    writer.add_input("in", "t", columns_for_fields(None), records)
    path = writer.commit()
    assert Snapshot.open(path).manifest.format == "ddflow-snapshot/2"
    body = json.loads((path / MANIFEST).read_text())
    body.pop("checksum")
    body["format"] = "ddflow-snapshot/1"  # as written before the key hash: shards by crc32
    body["checksum"] = _checksum(body)
    (path / MANIFEST).write_text(json.dumps(body))
    old = Snapshot.open(path)
    assert dict(old.read_input("in")[0]) == records
    with pytest.raises(SnapshotError, match="can only be read whole"):
        old.read_input("in", shards=[0])
    body["format"] = "ddflow-snapshot/9"
    body["checksum"] = _checksum({k: v for k, v in body.items() if k != "checksum"})
    (path / MANIFEST).write_text(json.dumps(body))
    with pytest.raises(SnapshotError, match="format 'ddflow-snapshot/9' is not 'ddflow-snapshot/2'"):
        Snapshot.open(path)


@pytest.mark.parametrize("shards,workers", [(4, 2), (3, 2), (6, 4), (1, 3)])
def test_a_workers_share_holds_the_keys_it_owns_read_from_the_shards_that_can_hold_them(tmp_path, monkeypatch,
                                                                                        shards, workers):
    from math import gcd

    rng = random.Random(shards * 10 + workers)
    base = {(rng.randrange(500), f"v{rng.randrange(5)}"): rng.choice([1, 2, -1]) for _ in range(600)}
    pending = [(r, 100 + rng.randrange(20), 1) for r in list(base)[:80]]
    writer = SnapshotWriter(tmp_path / "s", 100, shards=shards, origin="backfill")
    writer.add_input("in", "t", columns_for_fields({"k": "int", "v": "str"}), base, pending, {0: 3})
    snapshot = Snapshot.open(writer.commit())
    read = []
    real = Snapshot._read_file
    monkeypatch.setattr(Snapshot, "_read_file", lambda self, e, f, p: read.append(f.shard) or real(self, e, f, p))
    whole_base, whole_pending = snapshot.read_input("in")
    shares = []
    for i in range(workers):
        read.clear()
        shares.append(snapshot.read_input("in", owner=(i, workers)))
        g = gcd(shards, workers)
        assert set(read) == {s for s in range(shards) if s % g == i % g}  # only shards that can hold its keys
        assert {shard_of(r, workers) for r, _ in shares[-1][0]} | {shard_of(r, workers) for r, _, _ in shares[-1][1]} \
            <= {i}
    assert sorted(b for s in shares for b in s[0]) == sorted(whole_base) and all(s[0] for s in shares)
    assert sorted(p for s in shares for p in s[1]) == sorted(whole_pending)
    with pytest.raises(SnapshotError, match="the share of worker 2 of 2"):
        snapshot.read_input("in", owner=(2, 2))


def test_a_legacy_snapshot_is_read_whole_for_a_workers_share(tmp_path):
    from ddflow.daemon.state.manifest import _checksum

    records = {(i, "v"): 1 for i in range(40)}
    writer = SnapshotWriter(tmp_path / "s", 100, shards=4, origin="backfill")
    writer.add_input("in", "t", columns_for_fields(None), records)
    path = writer.commit()
    body = json.loads((path / MANIFEST).read_text())
    body.pop("checksum")
    body["format"] = "ddflow-snapshot/1"
    body["checksum"] = _checksum(body)
    (path / MANIFEST).write_text(json.dumps(body))
    old = Snapshot.open(path)
    shares = [dict(old.read_input("in", owner=(i, 3))[0]) for i in range(3)]
    assert all(shard_of(r, 3) == i for i, share in enumerate(shares) for r in share)
    assert {r: d for share in shares for r, d in share.items()} == records and all(shares)


def test_one_workers_checkpoint_of_several_is_refused_as_a_snapshot_to_start_from(tmp_path):
    from ddflow.daemon.state.recovery import Recovery
    from ddflow.daemon.input.source import InputSpec

    writer = SnapshotWriter(tmp_path / "s", 100, shards=2, origin="checkpoint")
    writer.add_input("in", "t", columns_for_fields({"k": "int"}), {(1,): 1}, offsets={0: 1})
    path = writer.commit(extra={"mesh": {"index": 1, "workers": 2}})  # as a mesh worker's checkpoint says
    for worker in ((0, 1), (1, 2)):
        recovery = Recovery([InputSpec("in", "t", {"k": "int"})], {}, snapshot_from=str(path), worker=worker)
        with pytest.raises(SnapshotError, match="the checkpoint of one worker of several"):
            recovery.choose()
