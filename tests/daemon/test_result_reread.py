"""A result reader that was delivered a partition with messages left out reads it again (msgpack
outputs, and json outputs' data and progress topics).

The embedded broker was seen to leave messages out of what a consumer was delivered (a writer's
epoch missing on one partition, which a later read found in place) while several transactional
writers published. Here the broker is the real one and the fault is made in the consumer the
client reads through: chosen offsets are dropped the first time they are delivered. The follower
finds a writer's epochs missing at that writer's next marker, the client seeks back and reads
the partition again, and the view is exact; where the epoch is really missing, it still raises.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer

from ddflow.daemon.exceptions import ProtocolError
from ddflow.daemon.formats import encoder
from ddflow.daemon.formats.result_protocol import (
    encode_output_batch,
    encode_output_progress,
    pack_output_update,
    pack_record,
)
from ddflow.daemon.kafka.following import ProtocolStats, ReadAgain, _Follower
from ddflow.daemon.kafka.results import ResultClient
from ddflow.operators.lattice import T_MIN

pytestmark = pytest.mark.kafka


class Leaving:
    """A consumer that leaves ``out`` ((partition, offset) pairs, of ``topic`` if given, else of any
    topic) out the first time it gets them."""

    def __init__(self, consumer: Any, out: set[tuple[int, int]], topic: str | None = None) -> None:
        self.consumer, self.out, self.topic = consumer, set(out), topic

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        got = self.consumer.consume(num_messages=num_messages, timeout=timeout)
        kept = []
        for msg in got:
            if (msg.error() is None and (msg.partition(), msg.offset()) in self.out
                    and self.topic in (None, msg.topic())):
                self.out.discard((msg.partition(), msg.offset()))
                continue
            kept.append(msg)
        return kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def read_leaving(kafka_options: dict[str, Any], topic: str, left_out: set[tuple[int, int]], upper: int,
                 of: str | None = None, **options: Any) -> tuple[dict, ProtocolStats]:
    """The view and counters of a client of ``topic`` reading again when idle (after 0.2 s), its
    consumer leaving ``left_out`` (of topic ``of``, else of any) out the first time, once its
    frontier reached ``upper``."""
    with ResultClient(topic, kafka_options, idle_reread=0.2, **options) as client:
        client._consumer = Leaving(client._consumer, left_out, of)
        assert client.wait_for(upper, timeout=30)
        return client.view, client.stats


def epoch(lower: int, upper: int, incarnation: str, writer: int, records: list[tuple[str, int, int]]) -> list[bytes]:
    """The batch (if any) and the marker of one writer's epoch of two."""
    updates = [pack_output_update(pack_record((key,), "out"), t, d) for key, t, d in records]
    batch = [encode_output_batch(lower, upper, incarnation, updates)] if updates else []
    return batch + [encode_output_progress(lower, upper, incarnation, len(updates), (writer, 2))]


def publish(kafka_options: dict[str, Any], topic: str, messages: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"]})
    for value in messages:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def test_a_partition_delivered_with_an_epoch_left_out_is_read_again_and_exact(kafka_options, make_topic):
    topic = make_topic("out")
    publish(kafka_options, topic, [
        *epoch(T_MIN, 10, "a", 0, [("x", 1, 1)]),  # offsets 0, 1
        *epoch(T_MIN, 10, "b", 1, [("y", 2, 1)]),  # offsets 2, 3: left out the first time
        *epoch(10, 20, "a", 0, [("x", 11, -1)]),  # offsets 4, 5
        *epoch(10, 20, "b", 1, [("z", 12, 1)]),  # offsets 6, 7: b's epochs look missing here
    ])
    with ResultClient(topic, kafka_options) as client:
        client._consumer = Leaving(client._consumer, {(0, 2), (0, 3)})
        assert client.wait_for(20, timeout=30)
        assert client.view == {("y",): 1, ("z",): 1}
        assert client.stats.reread == 1 and client.stats.incomplete_epochs == 0
        assert client.stats.duplicate_epochs == 2  # a's two epochs, accepted before reading again


def test_an_epoch_missing_from_the_topic_is_still_a_protocol_error(kafka_options, make_topic):
    topic = make_topic("out")
    publish(kafka_options, topic, [
        *epoch(T_MIN, 10, "a", 0, [("x", 1, 1)]),
        *epoch(T_MIN, 10, "b", 1, []),
        *epoch(20, 30, "b", 1, [("z", 22, 1)]),  # b's [10, 20) was never written
    ])
    with ResultClient(topic, kafka_options) as client:
        with pytest.raises(ProtocolError, match=r"epochs are missing; read again 3 times from before it"):
            client.wait_for(30, timeout=30)
        assert client.stats.reread == 3


def test_the_follower_reads_again_from_after_the_oldest_last_accepted_marker():
    """Without a consumer to seek, `ReadAgain` is the protocol error; it names where to read from:
    just after the oldest of the writers' last accepted markers, and what was pending is dropped."""
    follower = _Follower("out", 1, keep_view=True, stats=ProtocolStats())
    messages = [*epoch(T_MIN, 10, "a", 0, [("x", 1, 1)]), *epoch(T_MIN, 10, "b", 1, []),
                *epoch(10, 20, "a", 0, [("x", 11, 1)]), *epoch(10, 20, "b", 1, [])]
    for offset, value in enumerate(messages):
        follower.apply(0, offset, value)
    assert follower.frontier == 20
    follower.apply(0, 6, epoch(20, 30, "a", 0, [("w", 21, 1)])[0])  # a batch, pending
    with pytest.raises(ReadAgain) as raised:
        follower.apply(0, 7, epoch(30, 40, "b", 1, [])[0])  # b's [20, 30) is missing
    assert (raised.value.start, raised.value.at) == (5, 7)  # a last marked at 4, b at 5: from 4 + 1
    assert not follower.partitions[0].pending


def test_the_last_epoch_of_a_lone_writer_left_out_is_read_again_once_the_reader_idles_at_the_end(
        kafka_options, make_topic):
    """The last messages of the partition left out: the reader's position is past the last message
    it was delivered, so it reads again from after the last accepted marker."""
    topic = make_topic("out")
    publish(kafka_options, topic, [
        encode_output_batch(T_MIN, 10, "a", [pack_output_update(pack_record(("x",), "out"), 1, 1)]),
        encode_output_progress(T_MIN, 10, "a", 1, (0, 1)),
        encode_output_batch(10, 20, "a", [pack_output_update(pack_record(("y",), "out"), 11, 1)]),
        encode_output_progress(10, 20, "a", 1, (0, 1)),  # offsets 2, 3: left out the first time
    ])
    view, stats = read_leaving(kafka_options, topic, {(0, 2), (0, 3)}, 20)
    assert view == {("x",): 1, ("y",): 1}
    assert stats.idle_rereads >= 1 and stats.reread == 0


def test_a_writers_last_epoch_left_out_is_read_again_once_the_reader_idles_at_the_end(kafka_options, make_topic):
    """No later marker of writer b shows its last epoch missing: the reader, at the end of the
    partition with the frontier held back, reads it again from after b's last accepted marker."""
    topic = make_topic("out")
    publish(kafka_options, topic, [
        *epoch(T_MIN, 10, "a", 0, [("x", 1, 1)]),  # offsets 0, 1
        *epoch(T_MIN, 10, "b", 1, [("y", 2, 1)]),  # offsets 2, 3
        *epoch(10, 20, "a", 0, [("x", 11, -1)]),  # offsets 4, 5
        *epoch(10, 20, "b", 1, [("z", 12, 1)]),  # offsets 6, 7: left out the first time
    ])
    view, stats = read_leaving(kafka_options, topic, {(0, 6), (0, 7)}, 20)
    assert view == {("y",): 1, ("z",): 1}
    assert stats.idle_rereads >= 1 and stats.reread == 0
    assert stats.incomplete_epochs == 0


def test_an_idle_reader_reads_again_only_what_follows_the_last_accepted_markers(kafka_options, make_topic):
    """Idle at the end of a complete topic, nothing follows the last accepted marker: nothing is
    read again. An epoch's batch without its marker yet is read again (once per doubling wait) and
    counted once when its marker comes."""
    topic = make_topic("out")
    publish(kafka_options, topic, epoch(T_MIN, 10, "a", 0, [("x", 1, 1)])[:1]
            + [encode_output_progress(T_MIN, 10, "a", 1, (0, 1))])
    with ResultClient(topic, kafka_options, idle_reread=0.1) as client:
        assert client.wait_for(10, timeout=30)
        for _ in range(20):  # ~1 s at the end
            client.poll(0.05)
        assert client.stats.idle_rereads == 0
        publish(kafka_options, topic, [encode_output_batch(10, 20, "a", [pack_output_update(pack_record(("w",), "out"), 11, 2)])])
        deadline = time.monotonic() + 30
        while client.stats.idle_rereads < 2 and time.monotonic() < deadline:  # read again while unmarked
            client.poll(0.05)
        assert client.stats.idle_rereads >= 2 and client.frontier == 10
        publish(kafka_options, topic, [encode_output_progress(10, 20, "a", 1, (0, 1))])
        assert client.wait_for(20, timeout=30)
        assert client.view == {("x",): 1, ("w",): 2}
        assert client.stats.incomplete_epochs == 0 and client.stats.reread == 0


def test_a_writers_epochs_left_out_before_the_first_message_delivered_are_read_again_from_the_start(
        kafka_options, make_topic):
    """Writer b's only epoch, the partition's first messages, is left out: the first message the
    reader gets is writer a's. No accepted marker of b says where to read from, so the idle reader
    reads again from where it was assigned to begin (offset 0), not from its first message."""
    topic = make_topic("out")
    publish(kafka_options, topic, [
        *epoch(T_MIN, 10, "b", 1, [("y", 2, 1)]),  # offsets 0, 1: left out the first time
        *epoch(T_MIN, 10, "a", 0, [("x", 1, 1)]),  # offsets 2, 3
    ])
    view, stats = read_leaving(kafka_options, topic, {(0, 0), (0, 1)}, 10)
    assert view == {("x",): 1, ("y",): 1}
    assert stats.idle_rereads >= 1 and stats.reread == 0
    assert stats.duplicate_epochs >= 1  # a's epoch, read again with b's


def test_a_partition_whose_every_message_was_left_out_is_read_again_from_the_start(kafka_options, make_topic):
    """Nothing was delivered from the partition, but the reader's position passed its messages:
    idle at the end, it reads the partition again from where it was assigned to begin."""
    topic = make_topic("out")
    publish(kafka_options, topic, epoch(T_MIN, 10, "a", 0, [("x", 1, 1)])[:1]
            + [encode_output_progress(T_MIN, 10, "a", 1, (0, 1))])
    view, stats = read_leaving(kafka_options, topic, {(0, 0), (0, 1)}, 10)
    assert view == {("x",): 1}
    assert stats.idle_rereads >= 1


def json_epochs(topic: str, progress: str, epochs: list[tuple[int, int, str, int, list]]) -> tuple[list, list]:
    """The data messages and the markers of json epochs ``(lower, upper, incarnation, writer, records)``
    of a two-writer output on one partition, in that order on each topic."""
    enc = encoder("json", "out", topic, fields=["k"], progress_topic=progress)
    data, markers = [], []
    for lower, upper, incarnation, writer, records in epochs:
        messages, marker = enc.epoch(lower, upper, incarnation, 0, [((k,), t, d) for k, t, d in records], (writer, 2))
        data.extend(messages)
        markers.append(marker)
    return data, markers


def publish_json(kafka_options: dict[str, Any], messages: list) -> None:
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"]})
    for topic, _, key, value, headers in messages:
        producer.produce(topic, value, key=key, headers=headers, partition=0)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("left_out", ["data", "progress"])
def test_a_json_writers_last_epoch_left_out_is_read_again_once_the_reader_idles_at_the_end(
        kafka_options, make_topic, left_out):
    """A json output's writer b: its last data message, or its last marker on the progress topic,
    left out the first time. No gap shows it; the idle reader reads again the data partition and
    the progress partition its markers come on, and the view is exact."""
    topic, progress = make_topic("out"), make_topic("progress")
    data, markers = json_epochs(topic, progress, [
        (T_MIN, 10, "a", 0, [("x", 1, 1)]), (T_MIN, 10, "b", 1, [("y", 2, 1)]),
        (10, 20, "a", 0, [("x", 11, -1)]), (10, 20, "b", 1, [("z", 12, 1)]),
    ])
    assert len(data) == len(markers) == 4
    publish_json(kafka_options, data + markers)
    view, stats = read_leaving(kafka_options, topic, {(0, 3)}, 20, topic if left_out == "data" else progress,
                               format="json", progress_topic=progress, fields=["k"])
    assert view == {("y",): 1, ("z",): 1}
    assert stats.idle_rereads >= 1 and stats.incomplete_epochs == 0


def test_a_json_writers_epochs_left_out_before_the_first_data_delivered_are_read_again_from_the_start(
        kafka_options, make_topic):
    """Writer b's only data message and marker come first on their topics and are left out: no
    accepted epoch of b says where to read from, so both partitions are read again from offset 0."""
    topic, progress = make_topic("out"), make_topic("progress")
    data, markers = json_epochs(topic, progress, [(T_MIN, 10, "b", 1, [("y", 2, 1)]), (T_MIN, 10, "a", 0, [("x", 1, 1)])])
    publish_json(kafka_options, data + markers)
    view, stats = read_leaving(kafka_options, topic, {(0, 0)}, 10,  # offset 0 of both topics
                               format="json", progress_topic=progress, fields=["k"])
    assert view == {("x",): 1, ("y",): 1}
    assert stats.idle_rereads >= 2


def test_a_progress_partition_two_json_followers_share_is_read_again_once_from_the_least_start():
    """Two json outputs' markers on one progress partition, each follower holding its frontier back
    from a different marker: the idle reader seeks the partition once, from the earlier start (a
    seek per follower would leave the later one's start in force), and counts one re-read."""
    from confluent_kafka import TopicPartition

    from ddflow.daemon.formats import reader
    from ddflow.daemon.kafka.companion import _CompanionFollower
    from ddflow.daemon.kafka.reading import Routes

    class Seeking:
        def __init__(self) -> None:
            self.seeks: list[tuple[str, int, int]] = []

        def seek(self, tp: TopicPartition) -> None:
            self.seeks.append((tp.topic, tp.partition, tp.offset))

        def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
            return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    stats = ProtocolStats()
    followers = [_CompanionFollower(topic, 1, "progress", 1, reader("json", ["k"]), keep_view=True, stats=stats)
                 for topic in ("a", "b")]
    routes = Routes(followers, idle_reread=0.0)
    routes.consumer = Seeking()
    for f, mark in zip(followers, (3, 7)):  # writer 0 of 2 marked at progress offset 3 (a) and 7 (b)
        f.reading_from("progress", 0, 0)
        state = f.partitions[0]
        state.writers(2)
        state.progress, state.progress_marks = 0, {0: mark, 1: mark}
    routes.last[("progress", 0)] = 9
    routes.at_end = {key: True for key in routes.at_end}
    routes.idle()
    assert [s for s in routes.consumer.seeks if s[0] == "progress"] == [("progress", 0, 4)]
    assert stats.idle_rereads == 1


def test_a_complete_json_partition_is_not_read_again_only_its_progress_tail():
    """Idle at the end of a complete json output whose writer b left partition 0 no data: no marker
    waits for data, so the data partition is not read again (b's accepted epochs say nothing of where
    its next data will be: it would be read from the start every time); the progress partition is,
    from just after the older of the two writers' last accepted markers."""
    from ddflow.daemon.formats import reader
    from ddflow.daemon.kafka.companion import _CompanionFollower

    follower = _CompanionFollower("data", 1, "progress", 1, reader("json", ["k"]), keep_view=True,
                                  stats=ProtocolStats())
    enc = encoder("json", "out", "data", fields=["k"], progress_topic="progress")
    follower.reading_from("data", 0, 0)
    follower.reading_from("progress", 0, 0)
    data, marker_a = enc.epoch(T_MIN, 10, "a", 0, [(("x",), 1, 1)], (0, 2))
    _, marker_b = enc.epoch(T_MIN, 10, "b", 0, [], (1, 2))
    follower.take("data", 0, 0, data[0][3], data[0][4])
    follower.take("progress", 0, 0, marker_a[3], None)
    change = follower.take("progress", 0, 1, marker_b[3], None)
    assert change is not None and change.frontier == 10 and follower.view == {("x",): 1}
    assert follower.held_back() == [("progress", 0, 1)]
