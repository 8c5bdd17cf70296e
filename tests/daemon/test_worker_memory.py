"""The worker over the in-memory source and sink (`ddflow.daemon.testing`): epochs, progress, late
data, dead letters and offsets, without a broker. The same behaviour is tested against the real
broker in test_worker.py; here every epoch is checked exactly, since nothing is timed."""

from __future__ import annotations

import msgpack
import pytest

from ddflow.daemon import EpochPolicy, InputSpec, Sink, Source, Worker
from ddflow.daemon.exceptions import OptionsError, WorkerError
from ddflow.daemon.testing import ListSink, ReplaySource
from ddflow.operators.lattice import T_MIN
from flows import INPUTS, OUTPUTS, join_count, oracle
from test_worker import STEP, by_input, random_stream


UNTYPED, INTS = ["key", "val"], {"key": "int", "val": "int"}  # INTS: batches decoded straight into columns


def make(*, partitions=3, policy="explicit", late="advance", epochs=None, dead_letters=True, fields=UNTYPED,
         commit_interval=0.0, **kwargs):
    sink = ListSink(OUTPUTS, dead_letter_topic="dlq" if dead_letters else None, commit_interval=commit_interval)
    source = ReplaySource([InputSpec(name, f"t-{name}", fields=fields, policy=policy, late=late)
                           for name in INPUTS], partitions=partitions, dead_letters=sink.dead_letters,
                          stats=sink.stats)
    worker = Worker(join_count, source, sink, epochs=epochs or EpochPolicy(resolution_ns=100), poll_timeout=0,
                    **kwargs)
    return worker, source, sink


def send(source, stream, *, per_message=5, partitions=3):
    """The stream as the update producer writes it: batches per partition, markers at every step."""
    step = 0
    pending = {(name, p): [] for name in INPUTS for p in range(partitions)}

    def flush():
        for (name, p), ups in pending.items():
            if ups:
                source.send_updates(name, ups, partition=p)
                ups.clear()

    for i, (name, record, t, diff) in enumerate(stream):
        while t >= (step + 1) * STEP:
            flush()
            step += 1
            for n in INPUTS:
                source.advance_to(n, step * STEP)
        bucket = pending[(name, i % partitions)]
        bucket.append((record, t, diff))
        if len(bucket) >= per_message:
            flush()
    flush()
    for n in INPUTS:
        source.advance_to(n, (step + 1) * STEP)
    return (step + 1) * STEP


def test_the_doubles_implement_the_protocols():
    worker, source, sink = make()
    assert isinstance(source, Source) and isinstance(sink, Sink)
    with pytest.raises(OptionsError, match="does not implement ddflow.daemon.io.Sink"):
        Worker(join_count, source, object())


@pytest.mark.parametrize("seed,max_poll,fields", [(1, 7, UNTYPED), (2, 1000, UNTYPED), (3, 7, INTS), (4, 1000, INTS)])
def test_every_epoch_is_the_engine_at_its_upper(seed, max_poll, fields):
    stream = random_stream(seed, steps=12, per_step=40)
    worker, source, sink = make(max_poll_messages=max_poll, fields=fields)
    end = send(source, stream)
    epochs = worker.run(until=end, timeout=60)
    assert worker.frontier == end == sink.frontier and epochs == len(sink.epochs) >= (5 if max_poll < 100 else 1)
    captures = oracle(join_count, by_input(stream), INPUTS)
    lower = T_MIN
    for epoch in sink.epochs:
        assert epoch.lower == lower and epoch.upper % 100 == 0  # contiguous, on the 100 ns grid
        lower = epoch.upper
        for out in OUTPUTS:
            assert all(epoch.lower <= t < epoch.upper for _, t, _ in epoch.updates[out])
            assert sink.view(out, at=epoch.upper) == captures[out].at(epoch.upper - 1), (out, epoch.upper)
    stats = worker.stats
    assert stats.input("a").updates + stats.input("b").updates == len(stream)
    assert stats.epochs == epochs and not sink.dead
    # the offsets committed with the last epoch are every message read, per partition
    assert sink.committed == {(f"t-{n}", p): source.messages(n, p) for n in INPUTS for p in range(3)}


def test_epochs_by_record_count_close_at_the_exact_input_frontier():
    stream = random_stream(3, steps=10, per_step=30)
    worker, source, sink = make(epochs=EpochPolicy(resolution_ns=None, max_records=40, deadline_s=0.05),
                                max_poll_messages=5)
    end = send(source, stream)
    worker.run(until=end, timeout=60)
    assert {e.upper for e in sink.epochs} <= {s * STEP for s in range(1, 11)} and len(sink.epochs) >= 3
    captures = oracle(join_count, by_input(stream), INPUTS)
    assert all(sink.view(o, at=e.upper) == captures[o].at(e.upper - 1) for e in sink.epochs for o in OUTPUTS)


def test_a_partition_without_progress_holds_the_frontier_back():
    worker, source, sink = make()
    worker.open()
    source.send_updates("a", [((1, 1), 10, 1)], partition=0)
    source.send_updates("b", [((1, 7), 20, 1)], partition=1)
    source.advance_to("b", 1000)
    source.advance_to("a", 1000, partitions=[0, 1])  # partition 2 of a promised nothing yet
    for _ in range(5):
        worker.step()
    assert worker.frontier == T_MIN and not sink.epochs and worker.source.frontier() == T_MIN
    source.advance_to("a", 500, partitions=[2])
    for _ in range(3):
        worker.step()
    assert worker.frontier == 500 and sink.view("joined") == {(1, (1, 7)): 1}
    source.advance_to("a", 1000, partitions=[2])
    worker.step()
    assert worker.frontier == 1000 and [e.upper for e in sink.epochs] == [500, 1000]
    worker.close()
    assert sink.closed == 1


@pytest.mark.parametrize("late", ["advance", "reject"])
def test_late_updates_advance_or_reject(late):
    worker, source, sink = make(late=late, partitions=1)
    worker.open()
    source.send_updates("a", [((1, 1), 10, 1)])
    source.send_updates("b", [((1, 7), 20, 1)])
    source.advance_to("a", 1000)
    source.advance_to("b", 1000)
    worker.step()
    assert worker.frontier == 1000
    late_offset = source.send_updates("a", [((1, 2), 500, 1), ((1, 3), 1500, 1)])  # one behind the frontier
    source.advance_to("a", 2000)
    source.advance_to("b", 2000)
    worker.step()
    worker.close()
    assert worker.frontier == 2000
    echo = sink.epochs[-1].updates["echo_a"]
    assert ((1, 3), 1500, 1) in echo
    assert worker.stats.input("a").late == {"advance": int(late == "advance"), "reject": int(late == "reject")}
    if late == "advance":
        assert ((1, 2), 1000, 1) in echo  # moved to the frontier it arrived behind
        assert not sink.dead
    else:
        assert all(record != (1, 2) for record, _, _ in echo)
        [letter] = sink.dead
        assert (letter.reason, letter.topic, letter.offset, letter.indexes) == ("late", "t-a", late_offset, {"late": [0]})


@pytest.mark.parametrize("fields", [UNTYPED, INTS])
def test_malformed_input_is_dead_lettered_and_the_rest_processed(fields):
    stream = random_stream(6, steps=4, per_step=30)
    worker, source, sink = make(max_poll_messages=20, fields=fields)
    bad = [b"\xc1", msgpack.packb([[1], 5, 1]), msgpack.packb([[1, 2], 5, 0]), msgpack.packb({"progress": "x"})]
    for i, value in enumerate(bad):
        source.send("a", value, partition=i % 3)
    end = send(source, stream)
    worker.run(until=end, timeout=60)
    captures = oracle(join_count, by_input(stream), INPUTS)
    assert all(sink.view(o) == captures[o].at(end - 1) for o in OUTPUTS)
    assert sorted(x.reason for x in sink.dead) == sorted(["bad_msgpack", "arity", "zero_diff", "bad_progress"])
    assert sorted((x.topic, x.partition, x.offset) for x in sink.dead) == [
        ("t-a", 0, 0), ("t-a", 0, 1), ("t-a", 1, 0), ("t-a", 2, 0)]
    assert sum(worker.stats.input("a").dead_letters.values()) == 4


def test_without_a_dead_letter_destination_bad_input_is_counted_and_dropped():
    worker, source, sink = make(dead_letters=False, partitions=1)
    source.send("a", b"\xc1")
    source.send_updates("a", [((1, 1), 5, 1)])
    for name in INPUTS:
        source.advance_to(name, 100)
    worker.run(until=100, timeout=30)
    assert worker.stats.input("a").dead_letters["bad_msgpack"] == 1 and not sink.dead
    assert sink.view("echo_a") == {(1, 1): 1}


def test_a_failed_commit_fails_the_epoch_and_commits_nothing():
    worker, source, sink = make(partitions=1)
    source.send_updates("a", [((1, 1), 5, 1)])
    for name in INPUTS:
        source.advance_to(name, 100)
    sink.fail_next = RuntimeError("the broker went away")
    with pytest.raises(RuntimeError, match="went away"):
        worker.run(until=100, timeout=30)
    assert not sink.epochs and not sink.committed and worker.stats.epochs == 0


def test_stop_publishes_up_to_the_exact_input_frontier():
    worker, source, sink = make(partitions=1, epochs=EpochPolicy(resolution_ns=1000))
    source.send_updates("a", [((1, 1), 1005, 1)])
    for name in INPUTS:
        source.advance_to(name, 1250)
    worker.open()
    worker.step()
    assert [e.upper for e in sink.epochs] == [1000]  # 1250 is between two boundaries of the 1000 ns grid
    worker.stop()
    worker.run(timeout=30)
    assert [(e.lower, e.upper) for e in sink.epochs] == [(T_MIN, 1000), (1000, 1250)]
    assert sink.view("echo_a") == {(1, 1): 1}


def test_dataflow_errors_name_the_epoch_and_step():
    def broken(df, inputs):
        return {name: inputs["a"].map(lambda r: 1 // 0) for name in OUTPUTS}

    sink = ListSink(OUTPUTS)
    source = ReplaySource([InputSpec("a", "a", fields=["k", "v"])], dead_letters=sink.dead_letters)
    source.send_updates("a", [((1, 2), 5, 1)])
    source.advance_to("a", 100)
    with pytest.raises(WorkerError, match=r"epoch \[-9223372036854775808, 100\): running the dataflow: .* raised ZeroDivisionError"):
        Worker(broken, source, sink, epochs=EpochPolicy(resolution_ns=100), poll_timeout=0).run(timeout=30)
    with pytest.raises(WorkerError, match="outputs .* are configured but the factory returned only"):
        Worker(lambda df, inputs: {}, source, ListSink(["x"])).open()


def test_readme_testing_snippet_runs_as_written(capsys):
    from support.docs import example

    code = example("worker-testing", "python")  # docs/dataflows.md, "Testing a dataflow without a broker"
    exec(compile(code, "docs/dataflows.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["[(-9223372036854775808, 10)]", "{('/home', 2): 1}", "['bad_msgpack']"]


def test_typed_fields_keep_their_types_and_bad_updates_of_a_batch_their_positions():
    """Batches of int/float/bool fields are decoded into columns; a batch with a bad update takes the
    general path: the bad one is dead-lettered at its position, the others kept, types exact."""
    sink = ListSink(["out"], dead_letter_topic="dlq")
    source = ReplaySource([InputSpec("a", "t-a", fields={"n": "int", "x": "float", "ok": "bool"})],
                          dead_letters=sink.dead_letters, stats=sink.stats)
    worker = Worker(lambda df, inputs: {"out": inputs["a"]}, source, sink, epochs=EpochPolicy(resolution_ns=10),
                    poll_timeout=0)
    good = [((1, 2.5, True), 3, 1), ((-(2**63), 1e300, False), 4, 2), ((2**63 - 1, -0.5, True), 5, -1)]
    source.send("a", msgpack.packb([[list(d), t, r] for d, t, r in good]))  # columns
    source.send("a", msgpack.packb([[[7, 1, False], 6, 1], [[8, 2.0, 1], 6, 1], [[9, 3.0, True], 6, 0]]))
    source.send("a", msgpack.packb([[10, 4.0, True], 7, 1]))  # a single update
    source.advance_to("a", 10)
    worker.run(until=10, timeout=60)
    got = sorted(sink.epochs[-1].updates["out"] + [u for e in sink.epochs[:-1] for u in e.updates["out"]],
                 key=lambda u: (u[1], u[0][0]))
    want = sorted(good + [((7, 1.0, False), 6, 1), ((10, 4.0, True), 7, 1)], key=lambda u: (u[1], u[0][0]))
    assert got == want
    assert [tuple(map(type, d)) for d, _, _ in got] == [(int, float, bool)] * len(want)
    [dead] = sink.dead
    assert dead.reason == "field_type" and dead.offset == 1
    assert sum(worker.stats.input("a").dead_letters.values()) == 2  # the bool given as 1, the zero diff


def test_the_epochs_of_a_commit_window_become_final_together():
    """With a commit interval, closed epochs wait in the sink's window: nothing of them is visible,
    reported or committed until the window commits, then all of them at once, in order."""
    stream = random_stream(7, steps=12, per_step=40)
    worker, source, sink = make(max_poll_messages=7, commit_interval=3600.0)  # commits only when told
    end = send(source, stream)
    reports = []
    worker.stats.on_epoch(reports.append)
    worker.open()
    closed = []
    while worker.frontier < end:
        report = worker.step()
        if report is not None:
            closed.append(report)
    assert len(closed) >= 5 and sink.pending() == len(closed)
    assert not sink.epochs and not reports and not sink.committed and worker.stats.epochs == 0
    worker.commit()
    assert sink.commits == 1 and sink.pending() == 0
    assert [e.upper for e in sink.epochs] == [r.upper for r in closed] == [r.upper for r in reports]
    assert sum(count for r in reports for _, count in r.latencies) == len(stream)  # each update's latency, once
    captures = oracle(join_count, by_input(stream), INPUTS)
    assert all(sink.view(o, at=e.upper) == captures[o].at(e.upper - 1) for e in sink.epochs for o in OUTPUTS)
    assert sink.committed == {(f"t-{n}", p): source.messages(n, p) for n in INPUTS for p in range(3)}
    worker.close()


def test_run_commits_the_window_before_it_returns():
    stream = random_stream(8, steps=6, per_step=30)
    worker, source, sink = make(max_poll_messages=7, commit_interval=3600.0)
    end = send(source, stream)
    worker.run(until=end, timeout=60)
    assert sink.frontier == end and sink.pending() == 0 and sink.commits == 1 and worker.stats.epochs == len(sink.epochs)


def test_a_failed_commit_of_a_window_commits_none_of_its_epochs():
    worker, source, sink = make(partitions=1, commit_interval=3600.0, epochs=EpochPolicy(resolution_ns=10))
    for t in (5, 15, 25):
        source.send_updates("a", [((t, 1), t, 1)])
        for name in INPUTS:
            source.advance_to(name, t + 5)
    sink.fail_next = RuntimeError("the broker went away")
    with pytest.raises(RuntimeError, match="went away"):
        worker.run(until=30, timeout=30)
    assert not sink.epochs and not sink.committed and worker.stats.epochs == 0
