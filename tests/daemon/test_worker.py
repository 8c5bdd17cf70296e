"""The worker end to end on the real broker: the result client's view at every frontier move
equals the engine's in-process result at that time, under every progress policy."""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections import Counter

import msgpack
import pytest
from confluent_kafka import Producer

from ddflow.daemon.deadletter import decode_dead_letter
from ddflow.daemon.exceptions import WorkerError
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.worker import Worker
from flows import INPUTS, OUTPUTS, join_count, oracle
from support.broker import read_topic

pytestmark = pytest.mark.kafka

STEP = 1000  # ns per producer step


@pytest.fixture
def topics(make_topic):
    names = {name: make_topic(name, partitions=3) for name in INPUTS}
    names.update({name: make_topic(name, partitions=2) for name in OUTPUTS})
    names["dlq"] = make_topic("dlq")
    return names


def random_stream(seed, steps, per_step, keys=6, vals=4):
    """Updates (input, record, time, diff) sorted by time; times within step s are in [s*STEP, (s+1)*STEP)."""
    rng = random.Random(seed)
    out = []
    for step in range(steps):
        for _ in range(per_step):
            out.append((rng.choice(INPUTS), (rng.randrange(keys), rng.randrange(vals)),
                        step * STEP + rng.randrange(STEP), rng.choice([1, 1, 2, -1])))
    return sorted(out, key=lambda u: u[2])


def produce(kafka_options, topics, stream, *, markers=True, pause=0.0):
    """Write the stream (markers at every step); with ``pause``, flush each step and wait that long."""
    with UpdateProducer(topics["a"], kafka_options, batch_size=5) as pa, \
            UpdateProducer(topics["b"], kafka_options, batch_size=5) as pb:
        producers = {"a": pa, "b": pb}
        step = 0
        for name, record, t, diff in stream:
            while t >= (step + 1) * STEP:
                step += 1
                if markers:
                    pa.advance_to(step * STEP)
                    pb.advance_to(step * STEP)
                if pause:
                    pa.flush()
                    pb.flush()
                    time.sleep(pause)
            producers[name].send(record, t, diff)
        if markers:
            pa.advance_to((step + 1) * STEP)
            pb.advance_to((step + 1) * STEP)
    return (step + 1) * STEP


def make_worker(kafka_options, topics, *, policy="explicit", idle_timeout=None, epochs=None, late="advance", **kwargs):
    inputs = [InputSpec(name, topics[name], fields=["key", "val"], policy=policy, idle_timeout=idle_timeout, late=late)
              for name in INPUTS]
    outputs = [OutputSpec(name, topics[name], max_batch_updates=50) for name in OUTPUTS]
    return kafka_worker(join_count, inputs, outputs, kafka_options, group_id=f"g-{topics['a']}",
                  epochs=epochs or EpochPolicy(resolution_ns=100), dead_letter_topic=topics["dlq"], **kwargs)


def by_input(stream):
    updates = {name: [] for name in INPUTS}
    for name, record, t, diff in stream:
        updates[name].append((record, t, diff))
    return updates


def assert_views_follow(kafka_options, topics, captures, until, outputs=("joined", "counts"), timeout=60):
    """At every frontier move of every output, the client's view is the oracle's at that time."""
    moves = {}
    for out in outputs:
        with ResultClient(topics[out], kafka_options) as client:
            moves[out] = 0
            for change in client.changes(timeout=timeout):
                t = change.frontier
                assert client.view == captures[out].at(t - 1), f"{out} differs at frontier {t}"
                moves[out] += 1
                if t >= until:
                    break
            assert client.frontier is not None and client.frontier >= until, f"{out} stuck at {client.frontier}"
            assert client.stats.duplicate_epochs == 0 and client.stats.incomplete_epochs == 0
    return moves


class Background:
    """Run a worker in a thread; re-raise its failure on join."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by join()
            self.error = exc

    def __enter__(self) -> Background:
        self.worker.open()
        self.thread.start()
        return self

    def wait(self, predicate, timeout=30.0, what="condition"):
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.error is not None:
                raise self.error
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        self.worker.stop()
        self.thread.join(30)
        self.worker.close()
        if self.error is not None and exc[0] is None:
            raise self.error


@pytest.mark.parametrize("seed,transactions", [(1, "auto"), (2, False)])
def test_explicit_policy_view_equals_engine_at_every_frontier(kafka_options, topics, seed, transactions):
    stream = random_stream(seed, steps=12, per_step=40)
    end = produce(kafka_options, topics, stream)
    worker = make_worker(kafka_options, topics, max_poll_messages=7, transactions=transactions)
    epochs = worker.run(until=end, timeout=120)
    assert worker.frontier == end and epochs >= 5
    assert worker.sink.transactional is (transactions == "auto")
    captures = oracle(join_count, by_input(stream), INPUTS)
    moves = assert_views_follow(kafka_options, topics, captures, end)
    assert min(moves.values()) >= 5
    stats = worker.stats
    assert stats.input("a").updates + stats.input("b").updates == len(stream)
    assert stats.input("a").late == {"advance": 0, "reject": 0}
    assert stats.epochs == epochs and stats.output("joined").updates == sum(len(c) for c in [captures["joined"].updates])
    # the input offsets were committed with the epochs (in the transaction, or after the flush)
    from confluent_kafka import Consumer, TopicPartition
    probe = Consumer({**kafka_options, "group.id": f"g-{topics['a']}"})
    committed = probe.committed([TopicPartition(topics["a"], p) for p in range(3)], timeout=10)
    probe.close()
    assert sum(tp.offset for tp in committed) == sum(p.offset for p in stats.input("a").partitions.values())


def test_variable_epochs_by_record_count_and_deadline(kafka_options, topics):
    stream = random_stream(3, steps=10, per_step=30)
    reports = []
    worker = make_worker(kafka_options, topics, epochs=EpochPolicy(resolution_ns=None, max_records=40, deadline_s=0.05),
                         max_poll_messages=5)
    worker.stats.on_epoch(reports.append)
    # live, step by step: over a backlog the frontier moves only as fast as the partitions' markers
    # come in, which depends on the order in which the client hands out the partitions' messages
    with Background(worker) as bg:
        end = produce(kafka_options, topics, stream, pause=0.05)
        bg.wait(lambda: worker.frontier >= end, timeout=120, what="the last marker")
    # epochs close at the exact input frontier (not rounded), so uppers are the producer's markers
    assert {r.upper for r in reports} <= {s * STEP for s in range(1, 11)} and len(reports) >= 3
    assert all(r.latencies or sum(r.updates_in.values()) == 0 or r.upper < end for r in reports)
    assert_views_follow(kafka_options, topics, oracle(join_count, by_input(stream), INPUTS), end)


def test_monotonic_policy_with_idle_partitions(kafka_options, topics):
    stream = random_stream(4, steps=10, per_step=40)
    produce(kafka_options, topics, stream, markers=False)
    last = max(t for _, _, t, _ in stream)
    worker = make_worker(kafka_options, topics, policy="monotonic", idle_timeout=0.3, max_poll_messages=1)
    # once every partition is idle, what was seen (up to `last`) is complete; fixed epochs of 100 ns
    # close up to the last multiple of 100 below that
    until = (last + 1) - (last + 1) % 100
    worker.run(until=until, timeout=120)
    assert worker.frontier == until
    assert worker.stats.input("a").late == {"advance": 0, "reject": 0}
    assert worker.stats.input("b").late == {"advance": 0, "reject": 0}
    moves = assert_views_follow(kafka_options, topics, oracle(join_count, by_input(stream), INPUTS), until)
    assert min(moves.values()) >= 3


def test_reclock_policy_assigns_arrival_times(kafka_options, topics):
    rng = random.Random(5)
    worker = make_worker(kafka_options, topics, policy="reclock", epochs=EpochPolicy(resolution_ns=1_000_000))
    sent = Counter()
    started = time.time_ns()
    with Background(worker) as bg:
        with UpdateProducer(topics["a"], kafka_options) as pa, UpdateProducer(topics["b"], kafka_options) as pb:
            for _burst in range(6):
                for _ in range(30):
                    name, producer = rng.choice([("a", pa), ("b", pb)])
                    producer.send((rng.randrange(5), rng.randrange(3)), 0, rng.choice([1, 1, -1]))
                    sent[name] += 1
                producer.flush()
                time.sleep(0.05)
        bg.wait(lambda: all(worker.stats.input(n).updates == sent[n] for n in INPUTS), what="all updates read")
        read_all = time.time_ns()
        bg.wait(lambda: worker.frontier > read_all, what="the epoch holding every update")
    finished = time.time_ns()
    # the assigned times, as the echo outputs publish them, drive the oracle
    echo = {name: [] for name in INPUTS}
    for name in INPUTS:
        with ResultClient(topics[f"echo_{name}"], kafka_options) as client:
            for change in client.changes(timeout=30):
                echo[name].extend(change.updates)
                if change.frontier >= read_all:
                    break
    times = {t for ups in echo.values() for _, t, _ in ups}
    assert all(started <= t <= finished for t in times) and len(times) >= 2
    assert_views_follow(kafka_options, topics, oracle(join_count, echo, INPUTS), read_all)


@pytest.mark.parametrize("late", ["advance", "reject"])
def test_late_updates_advance_or_reject(kafka_options, topics, late):
    worker = make_worker(kafka_options, topics, late=late)
    with Background(worker) as bg, UpdateProducer(topics["a"], kafka_options) as pa, \
            UpdateProducer(topics["b"], kafka_options) as pb:
        pa.insert((1, 1), 10)
        pb.insert((1, 7), 20)
        pa.advance_to(1000)
        pb.advance_to(1000)
        pa.flush()
        pb.flush()
        bg.wait(lambda: worker.frontier == 1000, what="frontier 1000")
        raw = Producer(kafka_options)
        raw.produce(topics["a"], msgpack.packb([[1, 2], 500, 1]), partition=0)  # behind the frontier
        raw.flush()
        bg.wait(lambda: worker.stats.input("a").late[late] == 1, what="the late update")
        pa.advance_to(2000)
        pb.advance_to(2000)
        pa.flush()
        pb.flush()
        bg.wait(lambda: worker.frontier == 2000, what="frontier 2000")
    updates = []
    with ResultClient(topics["echo_a"], kafka_options) as client:
        for change in client.changes(timeout=30):
            updates.extend(change.updates)
            if change.frontier >= 2000:
                break
    if late == "advance":
        assert ((1, 2), 1000, 1) in updates  # moved to the frontier it arrived behind
    else:
        assert all(record != (1, 2) for record, _, _ in updates)
        letters = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in read_topic(kafka_options["bootstrap.servers"], topics["dlq"], 1)]
        assert [(x.reason, x.topic, x.partition) for x in letters] == [("late", topics["a"], 0)]


def test_malformed_input_goes_to_the_dead_letter_topic_and_the_rest_is_processed(kafka_options, topics, caplog):
    stream = random_stream(6, steps=4, per_step=30)
    raw = Producer(kafka_options)
    bad = [b"\xc1", msgpack.packb([[1], 5, 1]), msgpack.packb([[1, 2], 5, 0]), msgpack.packb({"progress": "x"}),
           msgpack.packb([[1, 2], 6, 0])]
    for i, value in enumerate(bad):
        raw.produce(topics["a"], value, partition=i % 3)
    raw.flush()
    end = produce(kafka_options, topics, stream)
    worker = make_worker(kafka_options, topics, max_poll_messages=20)
    with caplog.at_level(logging.WARNING, logger="ddflow.daemon.deadletters"):
        worker.run(until=end, timeout=120)
    assert_views_follow(kafka_options, topics, oracle(join_count, by_input(stream), INPUTS), end)
    letters = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in read_topic(kafka_options["bootstrap.servers"], topics["dlq"], 1)]
    assert sorted(x.reason for x in letters) == sorted(["bad_msgpack", "arity", "zero_diff", "bad_progress", "zero_diff"])
    assert sorted((x.topic, x.partition, x.offset) for x in letters) == [
        (topics["a"], 0, 0), (topics["a"], 0, 1), (topics["a"], 1, 0), (topics["a"], 1, 1), (topics["a"], 2, 0)]
    assert sorted(x.raw for x in letters) == sorted(bad)  # the messages as they came (Connect's convention)
    assert {(x.worker, x.stage) for x in letters} == {(0, "VALUE_CONVERTER")}
    assert sum(worker.stats.input("a").dead_letters.values()) == 5
    # said in the log: one WARNING per reason when first seen, naming where; the second zero_diff counted
    lines = [r.getMessage() for r in caplog.records if r.name == "ddflow.daemon.deadletters"]
    first = [line for line in lines if line.startswith("dead letter (")]
    assert sorted(line.split(")")[0] for line in first) == [
        "dead letter (arity", "dead letter (bad_msgpack", "dead letter (bad_progress", "dead letter (zero_diff"]
    assert f"dead letter (bad_msgpack): input 'a' {topics['a']}[0] offset 0: " in "".join(first)
    counted = [line for line in lines if line.startswith("dead letters (")]
    assert len(counted) == 1 and counted[0].startswith("dead letters (zero_diff): 1 more messages in the last ")
    zero = {f"{topics['a']}[1] offset 1", f"{topics['a']}[2] offset 0"}  # the two zero_diff messages
    assert {line.split(": ")[1].removeprefix("input 'a' ") for line in first if "(zero_diff)" in line} | \
        {counted[0].split("the first input 'a' ")[1].split(":")[0]} == zero
    assert "FormatError: invalid msgpack" in "".join(first)  # not an empty detail


def test_dataflow_errors_name_the_epoch_and_step(kafka_options, topics, caplog):
    def broken(df, inputs):
        return {name: inputs["a"].map(lambda r: 1 // 0) for name in OUTPUTS}

    worker = kafka_worker(broken, [InputSpec("a", topics["a"], fields=["k", "v"])],
                    [OutputSpec(n, topics[n]) for n in OUTPUTS], kafka_options, group_id=f"g-{topics['a']}x",
                    epochs=EpochPolicy(resolution_ns=100))
    with UpdateProducer(topics["a"], kafka_options) as pa:
        pa.insert((1, 2), 5)
        pa.advance_to(100)
    with pytest.raises(WorkerError, match=r"epoch \[-9223372036854775808, 100\): running the dataflow: .* raised ZeroDivisionError") \
            as info, caplog.at_level(logging.ERROR, logger="ddflow.daemon.worker"):
        worker.run(timeout=30)
    # the operator, the function with its file and line, the record and its time, and what to do
    line = broken.__code__.co_firstlineno + 1
    assert f"running the dataflow: map function {broken.__qualname__}.<locals>." in str(info.value)
    assert f".<lambda> ({__file__}:{line}) raised ZeroDivisionError: integer division or modulo by zero on the " \
           "record (1, 2) at time 5. " in str(info.value)
    assert "fix the function so that it accepts every record" in str(info.value)
    traced = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert traced and "1 // 0" in "".join(traceback.format_exception(*traced[0].exc_info))
    with pytest.raises(WorkerError, match="outputs .* are configured but the factory returned only"):
        kafka_worker(lambda df, inputs: {}, [InputSpec("a", topics["a"])], [OutputSpec("x", topics["joined"])],
               kafka_options).open()
