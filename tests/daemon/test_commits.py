"""Commits in the background: the next epochs compute while a window commits, go into the next
window, and become final only when their own commit lands; a failed commit commits nothing of
itself nor of what followed, and a replay gives the same outputs. In memory (`ListSink` with
``background=True``, a ``gate`` holding a commit as a slow broker would) and on the real broker
(a `KafkaSink` whose commits wait for a gate)."""

from __future__ import annotations

import threading

import pytest

from ddflow.daemon import EpochPolicy, InputSpec, Worker
from ddflow.daemon.output.commits import Committer
from ddflow.daemon.kafka.results import ResultClient
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.daemon.input.source import KafkaSource
from ddflow.daemon.testing import ListSink, ReplaySource
from flows import INPUTS, OUTPUTS, join_count, oracle
from test_worker import STEP, by_input, produce, random_stream
from test_worker_memory import send


def make(sink):
    source = ReplaySource([InputSpec(name, f"t-{name}", fields=["key", "val"]) for name in INPUTS], partitions=3,
                          dead_letters=sink.dead_letters, stats=sink.stats)
    worker = Worker(join_count, source, sink, epochs=EpochPolicy(resolution_ns=STEP), poll_timeout=0,
                    max_poll_messages=4)
    return worker, source


def step_until(worker, end):
    closed = []
    while worker.frontier < end:
        report = worker.step()
        if report is not None:
            closed.append(report)
    return closed


def assert_exact(sink, stream):
    captures = oracle(join_count, by_input(stream), INPUTS)
    for epoch in sink.epochs:
        for o in OUTPUTS:
            assert sink.view(o, at=epoch.upper) == captures[o].at(epoch.upper - 1), (o, epoch.upper)


def test_later_epochs_compute_while_a_commit_is_in_flight_and_commit_in_the_next_transaction():
    stream = random_stream(21, steps=8, per_step=30)
    sink = ListSink(OUTPUTS, background=True)
    sink.gate = threading.Event()  # the first commit waits here: a slow broker
    worker, source = make(sink)
    end = send(source, stream)
    reports = []
    worker.stats.on_epoch(reports.append)
    worker.open()
    closed = step_until(worker, end)
    # every epoch was computed and published to the sink while the first commit was held ...
    assert len(closed) >= 6 and sink.pending() == len(closed)
    # ... and none is final: not committed, not reported, no offsets committed
    assert not sink.epochs and not reports and not sink.committed and worker.stats.epochs == 0
    sink.gate.set()
    worker.commit()
    ranges = [(r.lower, r.upper) for r in closed]
    assert sink.transactions == [ranges[:1], ranges[1:]]  # the first epoch alone, the later ones together
    assert [r.upper for r in reports] == [r.upper for r in closed]
    assert sink.committed == {(f"t-{n}", p): source.messages(n, p) for n in INPUTS for p in range(3)}
    assert_exact(sink, stream)
    worker.close()


def first_epoch_lands(worker, sink):
    """Step until the first epoch closed, then let its commit land while the next commits wait
    for a new gate (returned with the first epoch's report)."""
    first = None
    while first is None:
        first = worker.step()
    held, sink.gate = sink.gate, threading.Event()
    held.set()
    while not sink.epochs:
        worker.step()
    return first, sink.gate


def test_an_epoch_is_reported_only_when_its_own_commit_landed():
    stream = random_stream(22, steps=6, per_step=20)
    sink = ListSink(OUTPUTS, background=True)
    sink.gate = threading.Event()
    worker, source = make(sink)
    end = send(source, stream)
    worker.open()
    first, second_gate = first_epoch_lands(worker, sink)
    assert worker.stats.epochs == 1 and [e.upper for e in sink.epochs] == [first.upper]
    step_until(worker, end)  # (some later epochs may have closed while the first commit landed)
    assert worker.frontier == end > first.upper and sink.pending() >= 1
    assert worker.stats.epochs == 1 and len(sink.epochs) == 1  # the later ones wait for their commit
    second_gate.set()
    worker.commit()
    assert worker.stats.epochs == len(sink.epochs) > 1 and sink.frontier == end and sink.pending() == 0
    assert [r for t in sink.transactions for r in t] == [(e.lower, e.upper) for e in sink.epochs]
    assert_exact(sink, stream)
    worker.close()


def test_a_failed_commit_commits_nothing_after_it_and_a_replay_gives_the_same_outputs():
    stream = random_stream(23, steps=8, per_step=30)
    sink = ListSink(OUTPUTS, background=True)
    sink.gate = threading.Event()
    worker, source = make(sink)
    end = send(source, stream)
    worker.open()
    first, second_gate = first_epoch_lands(worker, sink)
    committed = dict(sink.committed)
    sink.fail_next = RuntimeError("the broker went away")  # the next commit fails ...
    with pytest.raises(RuntimeError, match="went away"):
        for _ in range(100_000):
            worker.step()
            if worker.frontier >= end:  # ... after every later epoch was computed
                second_gate.set()
    assert worker.frontier == end
    assert [e.upper for e in sink.epochs] == [first.upper] and sink.committed == committed
    worker.close()
    # a restart replays the inputs (from the beginning, without a checkpoint): the same outputs
    again = ListSink(OUTPUTS)
    replay, replayed = make(again)
    send(replayed, stream)
    replay.run(until=end, timeout=60)
    assert_exact(again, stream)
    captures = oracle(join_count, by_input(stream), INPUTS)
    assert all(again.view(o) == captures[o].at(end - 1) for o in OUTPUTS)
    assert all(again.view(o, at=first.upper) == sink.view(o) for o in OUTPUTS)


def test_an_idle_worker_commits_at_once_and_a_busy_one_batches_its_epochs_by_the_interval():
    """The commit interval batches epochs while input keeps coming; once the worker has read all
    there is, waiting out the interval would batch nothing and only delay the outputs (the demo's
    changes each waited ~50 ms for it), so the window commits at once."""
    stream = random_stream(25, steps=8, per_step=30)
    sink = ListSink(OUTPUTS, commit_interval=3600.0, background=True)
    worker, source = make(sink)  # four messages per poll: reading the backlog takes many steps
    worker.poll_timeout = 0.05
    end = send(source, stream)
    timeouts = []  # (the poll's timeout, whether an epoch closed in the step before)
    polling = source.poll

    def poll(*args, **kwargs):
        timeouts.append((kwargs["timeout"], worker._just_closed))
        return polling(*args, **kwargs)

    source.poll = poll
    worker.open()
    closed = step_until(worker, end)
    assert len(closed) >= 6 and not sink.epochs  # every epoch closed while input kept coming: none committed
    for _ in range(100_000):  # the next polls find nothing: the window commits, within the hour's interval
        worker.step()
        if sink.epochs:
            break
    assert [[(r.lower, r.upper) for r in closed]] == sink.transactions  # one transaction holds them all
    assert worker.stats.epochs == len(closed) and sink.pending() == 0
    assert_exact(sink, stream)
    source.send_updates("a", [((1, 1), end + 10, 1)], partition=0)  # one more epoch, then idle again
    source.advance_to("a", end + STEP)
    source.advance_to("b", end + STEP)
    for _ in range(100_000):
        worker.step()
        if len(sink.transactions) == 2:
            break
    assert sink.transactions[1] == [(end, end + STEP)] and worker.stats.epochs == len(closed) + 1
    # with epochs waiting for a commit the loop does not block: not at all right after an epoch
    # closed, 1 ms otherwise; with none, the poll waits up to poll_timeout for input
    assert {t for t, just in timeouts if just} == {0.0}
    assert {t for t, just in timeouts if not just} == {0.001, 0.05}
    worker.close()


def test_the_committer_runs_one_commit_at_a_time_and_raises_in_the_callers_thread():
    committer = Committer()
    gate = threading.Event()
    committer.start(lambda: gate.wait(10) and threading.current_thread().name)
    assert committer.busy and not committer.done()
    with pytest.raises(RuntimeError, match="in flight"):
        committer.start(lambda: None)
    with pytest.raises(TimeoutError):
        committer.result(timeout=0.01)
    gate.set()
    assert committer.result() == "ddflow-commit" and not committer.busy
    threads = set()
    for _ in range(3):  # one thread serves every commit: starting one does not wait for a new thread
        committer.start(threading.current_thread)
        threads.add(committer.result())
    assert len(threads) == 1 and threading.current_thread() not in threads
    committer.start(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        committer.result()
    inline = Committer(background=False)
    inline.start(threading.current_thread)
    assert inline.done() and inline.result() is threading.current_thread()


class GatedSink(KafkaSink):
    """A Kafka sink whose commits wait for ``gate`` (a broker slow to commit)."""

    gate: threading.Event

    def _commit(self, window, offsets, consumer):
        self.gate.wait(60)
        return super()._commit(window, offsets, consumer)


@pytest.mark.kafka
def test_on_the_broker_epochs_compute_while_a_transaction_commits(kafka_options, make_topic):
    topics = {name: make_topic(name, partitions=2) for name in INPUTS}
    topics.update({name: make_topic(name, partitions=2) for name in OUTPUTS})
    stream = random_stream(24, steps=10, per_step=30)
    end = produce(kafka_options, topics, stream)
    group = f"g-{topics['a']}"
    sink = GatedSink([OutputSpec(o, topics[o]) for o in OUTPUTS], kafka_options, group_id=group,
                     transactional_id=f"t-{group}", transactions=True, commit_interval=0.0, background=True)
    sink.gate = threading.Event()
    source = KafkaSource([InputSpec(n, topics[n], fields=["key", "val"]) for n in INPUTS], kafka_options,
                         group_id=group, stats=sink.stats)
    worker = Worker(join_count, source, sink, epochs=EpochPolicy(resolution_ns=STEP), poll_timeout=0.05,
                    max_poll_messages=4)
    with worker:
        closed = step_until(worker, end)
        assert len(closed) >= 6 and sink.pending() == len(closed) and worker.stats.epochs == 0
        with ResultClient(topics["counts"], kafka_options) as client:  # read_committed: nothing final yet
            client.poll(timeout=1.0)
            assert client.frontier is not None and client.frontier <= closed[0].lower and not client.view
        sink.gate.set()
        worker.commit()
        assert worker.stats.epochs == len(closed) and sink.committed_upper == end
    captures = oracle(join_count, by_input(stream), INPUTS)
    for o in OUTPUTS:
        with ResultClient(topics[o], kafka_options) as client:
            client.wait_for(end, timeout=30)
            assert client.view == captures[o].at(end - 1)
            assert client.stats.duplicate_epochs == 0 and client.stats.incomplete_epochs == 0
