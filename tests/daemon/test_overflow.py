"""A multiplicity outside int64 stops the daemon with a clear error; a wrapped count is never published.

Two updates with diff 2**62 of one record used to accumulate to -2**63 in the output, silently.
The engine refuses every sum outside int64 (`DiffError`, naming the operator, the record and the
time); the worker then stops before publishing the epoch or committing its input offsets, and
`ddflow run` exits 1 with that message. The updates that overflow stay in the input, so a restart
stops the same way (it never skips them: dead-lettering them exactly is not possible once the
engine has summed part of them). With a checkpoint directory, an input whose own count would leave
int64 (a checkpoint stores int64 counts) is refused the same way before the epoch is published.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.broker import FETCH_WAIT_MS, create_topic
from support.daemons import DDFLOW, MS

from ddflow.daemon import EpochPolicy, InputSpec, Worker
from ddflow.daemon.exceptions import WorkerError
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.state.recovery import Recovery
from ddflow.daemon.testing import ListSink, ReplaySource
from ddflow.daemon.formats.result_protocol import OutputBatch, decode_output

BIG = 2**62
T0 = 1_700_000_000_000_000_000


def counts(df, inputs):
    return {"out": inputs["a"].map(lambda r: r[0]).count()}


def echo(df, inputs):
    return {"out": inputs["a"]}


def twice(df, inputs):
    return {"out": inputs["a"].concat(inputs["a"])}


def memory(flow, tmp_path=None):
    sink = ListSink(["out"])
    spec = InputSpec("a", "a", fields=["key", "val"])
    source = ReplaySource([spec], dead_letters=sink.dead_letters, stats=sink.stats)
    recovery = None if tmp_path is None else Recovery([spec], {"bootstrap.servers": "127.0.0.1:9"},
                                                      directory=str(tmp_path), interval=3600)
    worker = Worker(flow, source, sink, epochs=EpochPolicy(resolution_ns=10), poll_timeout=0, recovery=recovery)
    return worker, source, sink


def test_in_memory_a_count_outside_int64_stops_the_worker_before_publishing():
    worker, source, sink = memory(counts)
    with worker:
        source.send_updates("a", [(("x", 1), 5, BIG)])
        source.advance_to("a", 10)
        worker.run(until=10, timeout=30)
        committed = dict(sink.committed)
        source.send_updates("a", [(("x", 2), 15, BIG)])
        source.advance_to("a", 20)
        with pytest.raises(WorkerError) as err:
            worker.run(until=20, timeout=30)
    message = str(err.value)
    assert message.startswith("epoch [10, 20): running the dataflow: a multiplicity outside int64 was refused")
    assert "count: " in message and "'x'" in message and "at time (15,)" in message, message
    assert [e.upper for e in sink.epochs] == [10] and sink.view("out") == {("x", BIG): 1}
    assert sink.committed == committed  # the second epoch's offsets are not committed


def test_in_memory_the_epochs_before_a_refused_one_are_committed():
    """With a commit window (epochs committed together), the epochs closed before the refused one
    are valid and final: they are committed before the worker stops; the refused one is not."""
    sink = ListSink(["out"], commit_interval=3600)  # nothing commits on time during the test
    source = ReplaySource([InputSpec("a", "a", fields=["key", "val"])], dead_letters=sink.dead_letters,
                          stats=sink.stats)
    worker = Worker(counts, source, sink, epochs=EpochPolicy(resolution_ns=10), poll_timeout=0, max_epoch_updates=1)
    source.send_updates("a", [(("x", 1), 5, BIG)])
    source.advance_to("a", 10)
    source.send_updates("a", [(("x", 2), 15, BIG)])
    source.advance_to("a", 20)
    with pytest.raises(WorkerError, match=r"epoch \[10, 20\): running the dataflow: a multiplicity outside int64"):
        worker.run(until=20, timeout=30)
    assert [e.upper for e in sink.epochs] == [10] and sink.view("out") == {("x", BIG): 1}
    assert sink.committed == {("a", 0): 2}  # the first update and its marker


def test_in_memory_a_failing_dataflow_also_commits_the_epochs_before():
    """A user function that raises on one record stops the worker at that record's epoch every
    time; the epochs before it are committed first, or a restart would never publish them."""

    def fails_on_two(df, inputs):
        return {"out": inputs["a"].map(lambda r: r if r[1] != 2 else 1 // 0)}

    sink = ListSink(["out"], commit_interval=3600)
    source = ReplaySource([InputSpec("a", "a", fields=["key", "val"])], dead_letters=sink.dead_letters,
                          stats=sink.stats)
    worker = Worker(fails_on_two, source, sink, epochs=EpochPolicy(resolution_ns=10), poll_timeout=0,
                    max_epoch_updates=1)
    source.send_updates("a", [(("x", 1), 5, 1)])
    source.advance_to("a", 10)
    source.send_updates("a", [(("x", 2), 15, 1)])
    source.advance_to("a", 20)
    with pytest.raises(WorkerError, match=r"epoch \[10, 20\): running the dataflow: .* raised ZeroDivisionError"):
        worker.run(until=20, timeout=30)
    assert [e.upper for e in sink.epochs] == [10] and sink.view("out") == {("x", 1): 1}


@pytest.mark.parametrize("flow,where", [(echo, "draining output 'out'"), (twice, "draining output 'out'")])
def test_in_memory_an_output_diff_outside_int64_is_refused(flow, where):
    """Two updates of one record at one time (echo), or one update doubled by a concat: the
    epoch's output would hold a diff of 2**63."""
    worker, source, sink = memory(flow)
    source.send_updates("a", [(("x", 1), 5, BIG)])
    if flow is echo:
        source.send_updates("a", [(("x", 1), 5, BIG)])
    source.advance_to("a", 10)
    with pytest.raises(WorkerError, match=rf"epoch \[-\d+, 10\): {where}: a multiplicity outside int64 .*"
                                          r"capture: the diffs of \('x', 1\) at time 5 sum outside int64"):
        worker.run(until=10, timeout=30)
    assert sink.epochs == []


@pytest.mark.parametrize("others", [0, 20])
def test_in_memory_a_checkpointed_input_count_outside_int64_is_refused_before_publishing(tmp_path, others):
    """An input passed through unchanged is never summed by the dataflow, but its checkpoint holds
    its counts as int64 (the engine keeps it arranged for checkpoints): the second epoch is
    refused before it is published, whether the arrangement merges the two counts at once (a
    batch of one record each: the engine refuses the sum) or not yet (the first batch much
    larger: the checkpoint's check finds the count)."""
    worker, source, sink = memory(echo, tmp_path)
    with worker:
        source.send_updates("a", [(("x", 1), 5, BIG)] + [(("y", i), 5, 1) for i in range(others)])
        source.advance_to("a", 10)
        worker.run(until=10, timeout=30)
        source.send_updates("a", [(("x", 1), 15, BIG)])
        source.advance_to("a", 20)
        where = (r"running the dataflow: a multiplicity outside int64 was refused .*a\.state: .*\(\('x', 1\), \(\)\)"
                 if not others else
                 r"checkpoint state: a multiplicity outside int64 was refused .*input 'a': the count of \('x', 1\) "
                 r"before time 20 is outside int64")
        with pytest.raises(WorkerError, match=rf"epoch \[10, 20\): {where}"):
            worker.run(until=20, timeout=30)
    assert [e.upper for e in sink.epochs] == [10]


# -- ddflow run against the real broker -----------------------------------------------------------


def write_config(tmp_path: Path, bootstrap: str, views: str, results: str) -> Path:
    path = tmp_path / "daemon.toml"
    path.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:page_counts"

[kafka]
bootstrap = "{bootstrap}"
group_id = "{views}"

[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

[[inputs]]
name = "views"
topic = "{views}"
fields = ["user", "page"]

[[outputs]]
name = "page_views"
topic = "{results}"

[dead_letter]
topic = "{views}-dead"              # created by the test: the daemon never lets the broker auto-create one

[epoch]
resolution = "1ms"
max_updates = 1                     # an epoch per update: the first one is published before the second

[checkpoint]
location = "{tmp_path / 'checkpoints'}"
interval = "10ms"

[metrics]
address = "127.0.0.1:0"
""")
    return path


def published(options, topic):
    """Every update on the result topic, in order (aborted transactions' records included)."""
    consumer = Consumer({**options, "group.id": f"read-{topic}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    updates = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "the result topic did not end"
            if msg.error():
                break
            decoded = decode_output(msg.value())
            if isinstance(decoded, OutputBatch):
                updates.extend(decoded.updates)
    finally:
        consumer.close()
    return updates


def committed(options, group, topic):
    consumer = Consumer({**options, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


@pytest.mark.kafka
def test_run_exits_1_naming_the_operator_record_and_time_and_never_publishes_a_wrapped_count(
        kafka_options, make_topic, tmp_path):
    views, results = make_topic("views"), make_topic("page-views")
    create_topic(kafka_options["bootstrap.servers"], f"{views}-dead")
    options = {"bootstrap.servers": kafka_options["bootstrap.servers"]}
    config = write_config(tmp_path, options["bootstrap.servers"], views, results)
    with UpdateProducer(views, options) as producer:
        producer.send(("ann", "/a"), T0 + 1, BIG)
        producer.advance_to(T0 + MS)
        producer.send(("bob", "/a"), T0 + MS + 1, BIG)  # the count of "/a" would be 2**63
        producer.advance_to(T0 + 2 * MS)
    for attempt in range(2):  # a restart (from the checkpoint) stops the same way
        run = subprocess.run([DDFLOW, "run", "--config", str(config), "--timeout", "120"], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 1, (attempt, run.stderr)
        assert f"ddflow run: epoch [{T0 + MS}, {T0 + 2 * MS}): running the dataflow: a multiplicity outside int64 " \
               "was refused (nothing of this epoch is published" in run.stderr, run.stderr
        assert "count: " in run.stderr and "'/a'" in run.stderr and f"at time ({T0 + MS + 1},)" in run.stderr
        assert "Traceback" not in run.stderr
        updates = published(options, results)
        assert updates and all(diff > 0 for _, _, diff in updates)
        assert {record[1] for record, _, _ in updates} == {BIG}, updates  # never a wrapped (or any other) count
        assert all(t < T0 + MS for _, t, _ in updates)
        # what was read when the last published epoch closed is committed: the first run published
        # its first epoch having read offsets 0-1; the restart publishes the checkpoint's epoch again
        # (skipped: final) once the checkpoint is loaded, having read whatever came meanwhile (offset
        # 2, maybe the marker at 3 too): a restart resumes from its checkpoint's offsets, and the
        # group's offsets only say how far the daemon read
        assert committed(options, views, views) in ((2,) if attempt == 0 else (2, 3, 4)), attempt
