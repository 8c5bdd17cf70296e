"""A restart reads the result topics from the positions its checkpoint recorded, not from offset 0.

Every start used to read every result topic from the beginning to learn which times were final,
so restart time grew with the topics' history until it no longer fit the catch-up deadline (a
crash loop). A checkpoint now records, per output partition, the final frontier and the offset of
the progress marker that made it final; a restart reads from there (what was published since the
checkpoint), checks that the marker is still there, and refuses a result topic that was
recreated. benchmarks/bench_restart.py measures the restart time from 1K to 4M epochs.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from recovery_support import make_worker

from ddflow.daemon.exceptions import RecoveryError
from ddflow.daemon.kafka import positions
from ddflow.daemon.kafka.results import ResultClient
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.formats.result_protocol import encode_output_progress
from ddflow.daemon.formats.msgpack import encode_progress, encode_update
from support.broker import create_topic

pytestmark = pytest.mark.kafka

MS = 1_000_000


def write_history(kafka_options, topic, epochs):
    """``epochs`` empty epochs [MIN, 1), [1, 2), ... as an earlier daemon would have left them."""
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"], "linger.ms": 50,
                         "batch.num.messages": 10_000, "enable.idempotence": True})
    lower = T_MIN
    for upper in range(1, epochs + 1):
        producer.produce(topic, encode_output_progress(lower, upper, "history", 0), partition=0)
        lower = upper
        if upper % 50_000 == 0:
            producer.flush()
    producer.flush()


def spec(kafka_options, topics, directory):
    return {
        "kafka_options": dict(kafka_options),
        "group_id": f"g-{topics['a']}",
        "flow": "echo",
        "inputs": [{"name": "a", "topic": topics["a"], "fields": {"key": "int", "val": "int"}}],
        "outputs": [{"name": n, "topic": topics[n]} for n in ("echo_a", "counts")],
        "epoch": {"resolution_ns": MS},
        "worker": {"checkpoint_dir": str(directory), "checkpoint_interval": 3600.0},
    }


def send(kafka_options, topic, *values):
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"]})
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(10)


def run_and_stop(worker, until):
    """Run until the output frontier reaches ``until``, then stop (a checkpoint is written)."""
    worker.open()
    worker.run(until=until, timeout=60)
    worker.stop()
    worker.run(timeout=60)
    worker.close()


def test_a_restart_reads_only_what_follows_the_checkpointed_positions(kafka_options, make_topic, tmp_path):
    topics = {"a": make_topic("a"), "echo_a": make_topic("echo"), "counts": make_topic("counts")}
    history = 20_000
    write_history(kafka_options, topics["echo_a"], history)
    write_history(kafka_options, topics["counts"], history)
    t0 = history * MS
    send(kafka_options, topics["a"], encode_update([1, 1], t0 + 1, 1), encode_progress(t0 + 2 * MS))
    first = make_worker(spec(kafka_options, topics, tmp_path))
    run_and_stop(first, t0 + 2 * MS)
    assert first.sink.resume_stats.messages >= history  # no checkpoint yet: everything is read
    # a second incarnation publishes a few epochs after the checkpoint ...
    second = make_worker(spec(kafka_options, topics, tmp_path))
    send(kafka_options, topics["a"], encode_update([2, 1], t0 + 3 * MS, 1), encode_progress(t0 + 4 * MS),
         encode_update([1, 1], t0 + 5 * MS, -1), encode_progress(t0 + 6 * MS))
    second.open()
    assert second.recovery.restored.frontier == t0 + 2 * MS
    read = second.sink.resume_stats.messages
    assert read < 10, read  # the marker at the recorded position and what followed it, not the history
    assert second.sink.final[topics["echo_a"]] == [t0 + 2 * MS]
    second.run(until=t0 + 6 * MS, timeout=60)
    second.close()  # ... killed: no checkpoint of its own
    # the third restores the same checkpoint: it reads those epochs too and publishes nothing twice
    third = make_worker(spec(kafka_options, topics, tmp_path))
    third.open()
    assert third.recovery.restored.frontier == t0 + 2 * MS
    assert third.sink.final[topics["echo_a"]] == [t0 + 6 * MS] and third.sink.resume_stats.messages < 20
    send(kafka_options, topics["a"], encode_progress(t0 + 8 * MS))
    third.run(until=t0 + 8 * MS, timeout=60)
    third.close()
    with ResultClient(topics["echo_a"], kafka_options) as client:
        assert client.wait_for(t0 + 8 * MS, timeout=30)
        assert client.view == {(2, 1): 1} and client.stats.incomplete_epochs == 0
        assert client.stats.duplicate_epochs == 0  # no epoch published twice


class UnderReporting(Consumer):
    """A consumer whose broker reports every partition's high watermark as 0 (as the embedded broker
    was seen to do for a partition that held messages)."""

    def get_watermark_offsets(self, *args, **kwargs):
        low, _ = super().get_watermark_offsets(*args, **kwargs)
        return low, 0


def test_a_high_watermark_under_reported_as_0_does_not_refuse_a_restart(kafka_options, make_topic, tmp_path,
                                                                         monkeypatch):
    """The recorded positions are checked by reading from them, not by the high watermark: a broker
    that under-reports it (even as 0) made a restarted worker refuse its own result topic as
    recreated (exit 1, then a restart that read it fine)."""
    topics = {"a": make_topic("a"), "echo_a": make_topic("echo"), "counts": make_topic("counts")}
    write_history(kafka_options, topics["echo_a"], 20)
    send(kafka_options, topics["a"], encode_update([1, 1], 100 * MS, 1), encode_progress(102 * MS))
    run_and_stop(make_worker(spec(kafka_options, topics, tmp_path)), 102 * MS)
    monkeypatch.setattr(positions, "Consumer", UnderReporting)
    worker = make_worker(spec(kafka_options, topics, tmp_path))
    worker.open()
    assert worker.recovery.restored.frontier == 102 * MS
    assert worker.sink.final[topics["echo_a"]] == [102 * MS] and worker.sink.resume_stats.messages < 10
    worker.close()


def test_a_recorded_message_held_back_from_read_committed_readers_is_no_recreated_topic(kafka_options, make_topic,
                                                                                       caplog):
    """A recorded message that a read_committed read-back does not reach, but that is there (the
    broker holds it back: here an open transaction, which the embedded broker hides from such
    readers; it was also seen to hold back a killed producer's committed transactions for good), is
    no sign of a recreated topic: the read-back warns and goes on from what it was shown (the
    sink publishes the epochs after that again, and readers drop what they already hold)."""
    topic = make_topic("out")
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"], "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, encode_output_progress(T_MIN, 10, "a", 0), partition=0)
    producer.flush(30)
    try:
        with caplog.at_level(logging.WARNING, logger="ddflow.daemon.kafka.positions"):
            finals, last = positions.read_result_positions([topic], kafka_options, timeout=5, finals={topic: [T_MIN]},
                                                           starts={(topic, 0): 0})
        assert finals == {topic: [T_MIN]} and last == {(topic, 0): 0}
        assert "holds back committed messages from offset 0" in caplog.text
    finally:
        producer.abort_transaction(30)


def test_a_recreated_result_topic_is_refused(kafka_options, make_topic, tmp_path):
    topics = {"a": make_topic("a"), "echo_a": make_topic("echo"), "counts": make_topic("counts")}
    write_history(kafka_options, topics["echo_a"], 50)
    send(kafka_options, topics["a"], encode_update([1, 1], 100 * MS, 1), encode_progress(102 * MS))
    run_and_stop(make_worker(spec(kafka_options, topics, tmp_path)), 102 * MS)
    admin = AdminClient({"bootstrap.servers": kafka_options["bootstrap.servers"]})
    for future in admin.delete_topics([topics["echo_a"]], operation_timeout=10).values():
        future.result(10)
    create_topic(kafka_options["bootstrap.servers"], topics["echo_a"])
    worker = make_worker(spec(kafka_options, topics, tmp_path))
    # tansu answers a fetch past the end of the recreated, empty partition with nothing (neither out
    # of range nor its end): the read-back refuses it once this many seconds pass without a message
    worker.sink.timeout = 5.0
    with pytest.raises(RecoveryError, match=rf"{topics['echo_a']}\[0\].*offset \d+.*(recreated|deleted)"):
        worker.open()
    worker.close()


def test_a_json_output_resumes_from_its_data_and_progress_topics(kafka_options, make_topic, tmp_path):
    """A json output keeps its markers on a companion progress topic: a restart reads both from
    the recorded positions (the last message written on each), not from the beginning."""
    topics = {"a": make_topic("a"), "echo_a": make_topic("echo", partitions=2), "counts": make_topic("counts"),
              "progress": make_topic("progress", partitions=2)}
    worker_spec = spec(kafka_options, topics, tmp_path)
    worker_spec["outputs"][0].update(format="json", fields=["key", "val"], progress_topic=topics["progress"])
    first = make_worker(worker_spec)
    first.open()
    for step in range(1, 13):  # twelve epochs, each with data on both partitions
        send(kafka_options, topics["a"], encode_update([step, 0], step * MS, 1),
             encode_update([step, 1], step * MS, 1), encode_progress((step + 1) * MS))
        first.run(until=(step + 1) * MS, timeout=60)
    first.stop()
    first.run(timeout=60)
    first.close()
    second = make_worker(worker_spec)
    second.open()
    assert second.recovery.restored.frontier == 13 * MS
    assert second.sink.final[topics["echo_a"]] == [13 * MS, 13 * MS]
    assert second.sink.resume_stats.messages <= 6, second.sink.resume_stats  # not the 12 epochs' 36+ messages
    send(kafka_options, topics["a"], encode_update([1, 0], 13 * MS, -1), encode_progress(14 * MS))
    second.run(until=14 * MS, timeout=60)
    second.close()
    with ResultClient(topics["echo_a"], kafka_options, format="json", progress_topic=topics["progress"],
                      fields=["key", "val"]) as client:
        assert client.wait_for(14 * MS, timeout=30)
        assert client.view == {(s, v): 1 for s in range(1, 13) for v in (0, 1) if (s, v) != (1, 0)}
        assert client.stats.duplicate_epochs == 0 and client.stats.incomplete_epochs == 0
