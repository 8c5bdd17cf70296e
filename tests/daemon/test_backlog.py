"""A backlog is caught up in epochs of bounded size, so in bounded memory.

Updates produced while the daemon was down used to be fed to the engine as fast as they were
read: 3M of them became one epoch of 2.6M updates and a 5.4 GB peak. A worker now feeds at most
``max_epoch_updates`` updates (plus the rest of the message it is in) before closing an epoch, and
while an epoch is full but cannot close (a partition holds the frontier back) it reads only the
partitions that hold it, the others paused. benchmarks/bench_backlog.py measures a 10M-update
backlog. The same behaviour is checked over the in-memory doubles (`ddflow.daemon.testing`) at the
end, where every epoch can be checked exactly.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from support.daemons import view_at

from ddflow.daemon import EpochPolicy as Epochs
from ddflow.daemon import InputSpec as Input
from ddflow.daemon import Worker
from ddflow.daemon.exceptions import OptionsError
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.formats.msgpack import encode_progress, encode_updates

PER_MESSAGE = 100
KEYS = 50


def counts(df, inputs):
    return {"counts": inputs["a"].map(lambda r: r[0]).count()}


def make_worker(kafka_options, topics, limit, **extra):
    return kafka_worker(counts, [InputSpec("a", topics["a"], fields={"key": "int", "val": "int"})],
                        [OutputSpec("counts", topics["counts"])], kafka_options, group_id=f"g-{topics['a']}",
                        epochs=EpochPolicy(resolution_ns=1), max_epoch_updates=limit, max_poll_messages=10_000,
                        **extra)


def backlog(kafka_options, topic, partition, messages, *, start=0):
    """``messages`` messages of PER_MESSAGE updates on ``partition``, each followed by a marker;
    message m holds times m*10 .. and promises m*10 + 10. Returns the updates."""
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"], "linger.ms": 20})
    sent = []
    for m in range(start, start + messages):
        updates = [((i % KEYS, m), m * 10 + i % 10, 1) for i in range(PER_MESSAGE)]
        producer.produce(topic, encode_updates([([k, v], t, d) for (k, v), t, d in updates]), partition=partition)
        producer.produce(topic, encode_progress(m * 10 + 10), partition=partition)
        sent.extend(updates)
    producer.flush(30)
    return sent


def expected_counts(sent):
    return {(key, count): 1 for key, count in Counter(k for (k, _), _, _ in sent).items()}


@pytest.mark.kafka
def test_a_backlog_is_caught_up_in_epochs_of_bounded_size(kafka_options, make_topic):
    topics = {"a": make_topic("a"), "counts": make_topic("counts")}
    sent = backlog(kafka_options, topics["a"], 0, 600)  # 60,000 updates waiting
    worker = make_worker(kafka_options, topics, 5_000)
    fed = []
    worker.stats.on_epoch(lambda report: fed.append(sum(report.updates_in.values())))
    worker.run(until=6000, timeout=120)
    assert worker.frontier == 6000 and sum(fed) == len(sent)
    assert max(fed) <= 5_000 + PER_MESSAGE and len(fed) >= 12, fed  # before: one poll, one 60,000-update epoch
    assert worker.peak_open_updates <= 5_000 + PER_MESSAGE
    assert view_at(topics["counts"], kafka_options, 6000) == expected_counts(sent)


@pytest.mark.kafka
def test_partitions_ahead_wait_while_a_full_epoch_cannot_close(kafka_options, make_topic):
    """Partition 0 holds a backlog; partition 1 has promised nothing yet, so no epoch can close.
    The worker reads partition 0 until the epoch is full, then pauses it (before, it read and fed
    the whole backlog). Once partition 1's markers come, it catches up epoch by epoch."""
    topics = {"a": make_topic("a", partitions=2), "counts": make_topic("counts")}
    sent = backlog(kafka_options, topics["a"], 0, 300)  # 30,000 updates on partition 0
    worker = make_worker(kafka_options, topics, 5_000)
    fed = []
    worker.stats.on_epoch(lambda report: fed.append(sum(report.updates_in.values())))
    worker.open()
    try:
        deadline = time.monotonic() + 30
        while worker.source.paused != {(topics["a"], 0)}:
            assert time.monotonic() < deadline, "partition 0 was never paused"
            worker.step()
        for _ in range(40):  # it stays paused and fed no more
            worker.step()
        assert worker.open_updates <= 5_000 + PER_MESSAGE and not fed
        assert worker.source.stats.input("a").updates <= 5_000 + PER_MESSAGE
        producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"]})
        for m in range(300):  # partition 1 catches up, one promise at a time
            producer.produce(topics["a"], encode_progress(m * 10 + 10), partition=1)
        producer.flush(10)
        worker.run(until=3000, timeout=120)
    finally:
        worker.close()
    assert worker.frontier == 3000 and sum(fed) == len(sent)
    assert max(fed) <= 5_000 + PER_MESSAGE and worker.peak_open_updates <= 5_000 + PER_MESSAGE, fed
    assert not worker.source.paused
    assert view_at(topics["counts"], kafka_options, 3000) == expected_counts(sent)


@pytest.mark.kafka
def test_a_restart_over_a_backlog_reads_nothing_more_once_full_while_its_checkpoint_loads(
        kafka_options, make_topic, tmp_path, monkeypatch):
    """The probe's case with checkpoints: the daemon stopped with a checkpoint, a backlog arrived,
    and the restart loads the checkpoint (held back here) while the backlog waits on the broker."""
    import threading

    from ddflow.daemon.state.snapshot import Snapshot

    topics = {"a": make_topic("a"), "counts": make_topic("counts")}
    checkpoints = {"checkpoint_dir": str(tmp_path), "checkpoint_interval": 0.01}
    sent = backlog(kafka_options, topics["a"], 0, 5)
    first = make_worker(kafka_options, topics, 5_000, **checkpoints)
    with first:
        first.run(until=50, timeout=60)
        first.stop()  # a checkpoint at 50 on the way out
        first.run(timeout=60)
    assert first.recovery.written[-1].frontier == 50
    sent += backlog(kafka_options, topics["a"], 0, 300, start=5)  # 30,000 updates arrived while it was down

    loaded = threading.Event()
    read_blocks = Snapshot.read_blocks

    def slow_read_blocks(self, *args, **kwargs):
        assert loaded.wait(120), "the test never let the checkpoint load"
        return read_blocks(self, *args, **kwargs)

    monkeypatch.setattr(Snapshot, "read_blocks", slow_read_blocks)
    worker = make_worker(kafka_options, topics, 5_000, **checkpoints)
    fed = []
    worker.stats.on_epoch(lambda report: fed.append(sum(report.updates_in.values())))
    with worker:
        assert worker.loading
        deadline = time.monotonic() + 60
        while worker.open_updates < 5_000:
            assert time.monotonic() < deadline, f"only {worker.open_updates} updates read"
            worker.step()
        for _ in range(40):
            worker.step()
        assert worker.loading and worker.open_updates <= 5_000 + PER_MESSAGE  # before: the whole backlog
        assert worker.source.stats.input("a").updates == worker.open_updates
        loaded.set()
        worker.run(until=3050, timeout=120)
    assert worker.frontier == 3050 and worker.peak_open_updates <= 5_000 + 2 * PER_MESSAGE
    assert max(fed) <= 5_000 + 2 * PER_MESSAGE, fed
    assert view_at(topics["counts"], kafka_options, 3050) == expected_counts(sent)


@pytest.mark.kafka
def test_the_bound_is_checked(kafka_options):
    with pytest.raises(OptionsError, match="max_epoch_updates"):
        make_worker(kafka_options, {"a": "a", "counts": "c"}, 0)


# -- the same over the in-memory doubles --------------------------------------------------------


def memory_worker(limit, *, partitions, max_poll_messages=10_000, source=None, checkpoints=None):
    from ddflow.daemon.state.recovery import Recovery
    from ddflow.daemon.testing import ListSink, ReplaySource

    sink = ListSink(["counts"])
    spec = Input("a", "a", fields=["key", "val"])
    source = source or ReplaySource([spec], partitions=partitions, dead_letters=sink.dead_letters, stats=sink.stats)
    recovery = None if checkpoints is None else Recovery([spec], {"bootstrap.servers": "127.0.0.1:9"},
                                                         directory=str(checkpoints), interval=0.001)
    worker = Worker(counts, source, sink, epochs=Epochs(resolution_ns=1), max_epoch_updates=limit,
                    max_poll_messages=max_poll_messages, poll_timeout=0, recovery=recovery)
    fed = []
    worker.stats.on_epoch(lambda report: fed.append(sum(report.updates_in.values())))
    return worker, source, sink, fed


def counts_below(sent, upper):
    total = Counter()
    for (key, _), t, diff in sent:
        if t < upper:
            total[key] += diff
    return {(key, n): 1 for key, n in total.items() if n}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_in_memory_every_epoch_is_bounded_and_exact(seed):
    """Messages of random sizes on three partitions, each followed by a marker, partition 0
    advancing far slower than the others (it holds the frontier back; the others are paused):
    no epoch feeds more than the bound plus one message plus, for each partition holding the
    frontier, its updates up to its next marker (here one message), no more are ever in flight,
    and the counts published are exact at every epoch."""
    rng = random.Random(seed)
    limit, biggest = rng.choice([50, 300, 1000]), 40
    worker, source, sink, fed = memory_worker(limit, partitions=3, max_poll_messages=rng.choice([1, 7, 10_000]))
    sent, ends = [], []
    for p in range(3):
        t = 0
        for _ in range(rng.randrange(100, 200)):
            step = 1 if p == 0 else rng.choice([5, 10, 20])
            ups = [((rng.randrange(20), rng.randrange(5)), t + rng.randrange(step), rng.choice([1, 1, 2]))
                   for _ in range(rng.randrange(1, biggest + 1))]
            source.send_updates("a", ups, partition=p)
            sent.extend(ups)
            t += step
            source.advance_to("a", t, partitions=[p])
        ends.append(t)
    end = min(ends)
    worker.run(until=end, timeout=120)
    assert worker.frontier == end
    bound = limit + biggest + 3 * biggest
    assert worker.peak_open_updates <= bound and max(fed) <= bound, (limit, worker.peak_open_updates, fed)
    assert sum(fed) == sum(1 for _, t, _ in sent if t < end) + worker.open_updates
    assert len(sink.epochs) > sum(fed) // bound
    for epoch in sink.epochs:
        assert sink.view("counts", at=epoch.upper) == counts_below(sent, epoch.upper), epoch.upper


def test_in_memory_partitions_ahead_are_paused_until_the_frontier_moves():
    """Partition 1 promises nothing: once the epoch is full, partition 0 is paused and nothing
    more is read from it however many steps run (before, every step fed it all)."""
    worker, source, sink, fed = memory_worker(500, partitions=2)
    sent = []
    for m in range(100):
        ups = [((i % KEYS, m), m * 10 + i % 10, 1) for i in range(PER_MESSAGE)]
        source.send_updates("a", ups, partition=0)
        source.advance_to("a", m * 10 + 10, partitions=[0])
        sent.extend(ups)
    with worker:
        for _ in range(50):
            worker.step()
        assert source.paused == {("a", 0)} and not fed
        assert 500 <= worker.open_updates == worker.peak_open_updates <= 500 + PER_MESSAGE
        assert source.stats.input("a").updates == worker.open_updates
        for m in range(100):
            source.advance_to("a", m * 10 + 10, partitions=[1])
        worker.run(until=1000, timeout=60)
        assert not source.paused and worker.frontier == 1000
    assert sum(fed) == len(sent) and max(fed) <= 500 + 2 * PER_MESSAGE
    assert sink.view("counts") == expected_counts(sent)


def test_in_memory_nothing_more_is_read_once_full_while_a_checkpoint_loads(tmp_path, monkeypatch):
    """A restart with a checkpoint over a backlog: while the checkpoint loads no epoch can close,
    so once the bound is reached the worker reads nothing (before, the partitions holding the
    frontier were read one marker at a time, step after step, the whole backlog in the end)."""
    import threading

    from ddflow.daemon.state.snapshot import Snapshot

    first, source, _, _ = memory_worker(300, partitions=2, checkpoints=tmp_path)
    sent = []

    def send(messages, start):
        for m in range(start, start + messages):
            ups = [((i % KEYS, m), m * 10 + i % 10, 1) for i in range(PER_MESSAGE)]
            source.send_updates("a", ups, partition=0)
            source.advance_to("a", m * 10 + 10)
            sent.extend(ups)

    send(5, 0)
    with first:
        first.run(until=50, timeout=60)
        first.stop()  # a checkpoint at 50 on the way out
        first.run(timeout=60)
    assert first.recovery.written and first.recovery.written[-1].frontier == 50
    send(100, 5)  # the backlog, arrived while it was down

    loaded = threading.Event()
    read_blocks = Snapshot.read_blocks

    def slow_read_blocks(self, *args, **kwargs):
        assert loaded.wait(60), "the test never let the checkpoint load"
        return read_blocks(self, *args, **kwargs)

    monkeypatch.setattr(Snapshot, "read_blocks", slow_read_blocks)
    monkeypatch.setattr("ddflow.daemon.state.recovery.check_offsets", lambda *_: None)  # the logs are in memory
    worker, _, sink, fed = memory_worker(300, partitions=2, source=source, checkpoints=tmp_path)
    before = source.stats.input("a").updates  # read by the first incarnation
    with worker:
        assert worker.loading
        for _ in range(200):
            worker.step()
        assert worker.loading and 300 <= worker.open_updates <= 300 + PER_MESSAGE
        assert source.stats.input("a").updates - before == worker.open_updates
        loaded.set()
        worker.run(until=1050, timeout=60)
    assert worker.frontier == 1050 and worker.peak_open_updates <= 300 + 2 * PER_MESSAGE
    assert max(fed) <= 300 + 2 * PER_MESSAGE
    assert sink.view("counts") == expected_counts(sent)
