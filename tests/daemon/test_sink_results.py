"""Sinks and the result client on the real broker: the output protocol end to end.

The client must see every final time exactly once although re-sent epochs, records of aborted
transactions (tansu shows them to read_committed consumers) and restarts write more.
"""

from __future__ import annotations

import random
from collections import Counter

import msgpack
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ddflow.daemon.deadletter import decode_dead_letter
from ddflow.daemon.exceptions import KafkaClientError, OptionsError, ProtocolError
from ddflow.daemon.kafka.following import ProtocolStats, _Follower
from ddflow.daemon.kafka.results import ResultClient, read_final_frontiers
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.formats.types import Malformed
from ddflow.daemon.formats.result_protocol import (
    OutputProgress,
    decode_output,
    encode_output_batch,
    encode_output_progress,
    pack_output_update,
    pack_record,
)
from support.broker import read_topic

pytestmark = pytest.mark.kafka


def random_epochs(seed, bounds, keys=20):
    """Random output updates per epoch [lower, upper) for the given boundaries."""
    rng = random.Random(seed)
    epochs = []
    lower = T_MIN
    for upper in bounds:
        lo = max(lower, 0)
        ups = [((f"k{rng.randrange(keys)}", rng.randrange(3)), rng.randrange(lo, upper), rng.choice([1, -1, 2]))
               for _ in range(rng.randrange(0, 40))]
        epochs.append((lower, upper, ups))
        lower = upper
    return epochs


def accumulate(updates, below):
    view = Counter()
    for record, t, diff in updates:
        if t < below:
            view[record] += diff
    return {r: c for r, c in view.items() if c}


def sink_for(kafka_options, topic, **kwargs):
    kwargs.setdefault("transactional_id", f"tx-{topic}")
    sink = KafkaSink([OutputSpec("out", topic, max_batch_updates=7)], kafka_options, **kwargs)
    sink.open()
    return sink


def test_view_at_every_marker_equals_the_accumulated_updates(kafka_options, make_topic):
    topic = make_topic("out", partitions=3)
    epochs = random_epochs(1, [10, 20, 35, 50, 51, 80])
    all_updates = [u for _, _, ups in epochs for u in ups]
    sink = sink_for(kafka_options, topic)
    assert sink.transactional
    for lower, upper, ups in epochs:
        sink.publish(lower, upper, {"out": ups})
    sink.close()
    with ResultClient(topic, kafka_options) as client:
        seen = []
        for change in client.changes(timeout=20):
            seen.append(change.frontier)
            assert client.view == accumulate(all_updates, change.frontier)
            if change.frontier == 80:
                break
    assert seen[-1] == 80 and seen == sorted(seen)
    assert client.stats.epochs == 3 * len(epochs)


def test_re_sent_epochs_with_other_boundaries_count_once(kafka_options, make_topic):
    topic = make_topic("out", partitions=2)
    first = random_epochs(2, [10, 20, 30])
    all_updates = [u for _, _, ups in first for u in ups]
    sink = sink_for(kafka_options, topic)
    for lower, upper, ups in first:
        sink.publish(lower, upper, {"out": ups})
    sink.close()
    # a restarted daemon that did not read the topic back re-sends everything, cut differently,
    # then goes on; its outputs at each time are the same (outputs are deterministic)
    again = KafkaSink([OutputSpec("out", topic)], kafka_options, transactional_id=f"tx-{topic}", resume=False)
    again.open()
    more = [((f"new{i}", 0), 30 + i, 1) for i in range(5)]
    again.publish(T_MIN, 15, {"out": [u for u in all_updates if u[1] < 15]})
    again.publish(15, 40, {"out": [u for u in all_updates if u[1] >= 15] + more})
    again.close()
    with ResultClient(topic, kafka_options) as client:
        assert client.wait_for(40, timeout=20)
        assert client.view == accumulate(all_updates + more, 40)
        assert client.stats.duplicate_epochs >= 2 and client.stats.dropped_updates > 0


def test_aborted_transaction_records_are_dropped(kafka_options, make_topic):
    topic = make_topic("out", partitions=2)
    good = random_epochs(3, [10, 20])
    sink = sink_for(kafka_options, topic)
    sink.publish(*good[0][:2], {"out": good[0][2]})
    # an epoch whose transaction aborts half-way (the broker still shows its records): a batch of
    # junk without a marker, under the sink's incarnation and under another one
    producer = sink.producer
    junk = [pack_output_update(pack_record(("junk", 0), "out"), 12, 5)]
    producer.begin_transaction()
    for inc in (sink.incarnation, "deadbeef"):
        for p in (0, 1):
            producer.produce(topic, encode_output_batch(10, 20, inc, junk), partition=p)
    producer.flush()
    producer.abort_transaction(10)
    # and a complete epoch written twice by the same logic: aborted once, then committed
    messages, _, _ = sink._encode(10, 20, {"out": good[1][2]})
    producer.begin_transaction()
    for t, p, _key, value, _headers in messages:
        producer.produce(t, value, partition=p)
    producer.flush()
    producer.abort_transaction(10)
    sink.incarnation = "second-attempt"
    sink.publish(10, 20, {"out": good[1][2]})
    sink.close()
    raw = read_topic(kafka_options["bootstrap.servers"], topic, 2)
    assert any(b"junk" in m.value() for m in raw)  # the broker does show aborted records
    with ResultClient(topic, kafka_options) as client:
        assert client.wait_for(20, timeout=20)
        assert client.view == accumulate(good[0][2] + good[1][2], 20)
        assert ("junk", 0) not in client.view
        assert client.stats.incomplete_epochs == 2  # both partitions hold junk of the same incarnation


def published_then_restarted(kafka_options, topic, seed):
    """Random epochs up to 30 on a 3-partition ``topic``, those up to 20 published and committed:
    the epochs, all their updates, and a sink opened afresh on the topic (it reads 20 as final)."""
    epochs = random_epochs(seed, [10, 20, 30])
    sink = sink_for(kafka_options, topic)
    for lower, upper, ups in epochs[:2]:
        sink.publish(lower, upper, {"out": ups})
    sink.close()
    return epochs, [u for _, _, ups in epochs for u in ups], sink_for(kafka_options, topic)


def test_restarted_sink_does_not_republish_final_times(kafka_options, make_topic):
    topic = make_topic("out", partitions=3)
    epochs, all_updates, restarted = published_then_restarted(kafka_options, topic, 4)
    assert read_final_frontiers([topic], kafka_options) == {topic: [20, 20, 20]}
    assert restarted.final[topic] == [20, 20, 20]
    restarted.publish(T_MIN, 20, {"out": [u for u in all_updates if u[1] < 20]})  # replayed: nothing written
    restarted.publish(20, 30, {"out": epochs[2][2]})
    restarted.close()
    out = restarted.stats.output("out")
    assert out.suppressed_updates == sum(1 for u in all_updates if u[1] < 20)
    assert out.updates == len(epochs[2][2])
    with ResultClient(topic, kafka_options) as client:
        assert client.wait_for(30, timeout=20)
        assert client.view == accumulate(all_updates, 30)
        assert client.stats.duplicate_epochs == 0


def test_a_partly_final_epoch_is_marked_from_the_final_frontier(kafka_options, make_topic):
    """A restarted sink whose replayed epoch straddles a partition's final frontier publishes only
    the times beyond it, and its marker says so: the epoch it marks is [final, upper). A reader
    that did not see the times below (it is behind that frontier) then finds an epoch missing
    instead of accepting an epoch that leaves them out."""
    topic = make_topic("out", partitions=3)
    _, all_updates, restarted = published_then_restarted(kafka_options, topic, 5)
    restarted.publish(10, 30, {"out": [u for u in all_updates if u[1] >= 10]})  # one replayed epoch over 20
    restarted.close()
    messages = read_topic(kafka_options["bootstrap.servers"], topic, 3)
    markers = [m for m in (decode_output(msg.value()) for msg in messages)
               if isinstance(m, OutputProgress) and m.incarnation == restarted.incarnation]
    assert sorted((m.lower, m.upper) for m in markers) == [(20, 30)] * 3
    assert sum(m.count for m in markers) == sum(1 for u in all_updates if u[1] >= 20)
    with ResultClient(topic, kafka_options) as client:
        assert client.wait_for(30, timeout=20)
        assert client.view == accumulate(all_updates, 30)
    behind = _Follower(topic, 1, keep_view=True, stats=ProtocolStats())
    behind.apply(0, 0, encode_output_progress(T_MIN, 10, "a", 0))
    with pytest.raises(ProtocolError, match="starts after the final frontier 10: epochs are missing"):
        behind.apply(0, 1, encode_output_progress(20, 30, "b", 0))


def test_the_client_reads_an_epoch_before_its_transaction_commits(kafka_options, make_topic):
    """The result client reads uncommitted records: an epoch whose batches and marker are written
    is final for it while their transaction is still open (a broker holding back committed
    transactions from read_committed consumers, as the embedded one was seen to, cannot stall it).
    The protocol keeps that exact: an aborted epoch is re-sent with the same output."""
    topic = make_topic("out")
    producer = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"], "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    update = pack_output_update(pack_record(("k", 1), "out"), 5, 1)
    producer.produce(topic, encode_output_batch(T_MIN, 10, "a", [update]), partition=0)
    producer.produce(topic, encode_output_progress(T_MIN, 10, "a", 1), partition=0)
    producer.flush(30)
    try:
        with ResultClient(topic, kafka_options) as client:
            assert client.wait_for(10, timeout=20)
            assert client.view == {("k", 1): 1}
    finally:
        producer.abort_transaction(30)


def test_closing_epoch_and_offsets_and_dead_letters_commit_together(kafka_options, make_topic):
    topic, dlq, source_topic = make_topic("out"), make_topic("dlq"), make_topic("in")
    sink = KafkaSink([OutputSpec("out", topic)], kafka_options, transactional_id=f"tx-{topic}",
                     dead_letter_topic=dlq, group_id=f"g-{topic}")
    sink.open()
    sink.dead_letters.write(input="x", topic=source_topic, partition=0, offset=3, raw=b"\x93\x91\x01\x01\x00",
                            errors=[Malformed("zero_diff", "diff is 0")])
    sink.publish(T_MIN, None, {"out": [(("a",), 5, 1)]}, offsets={(source_topic, 0): 4})
    sink.close()
    consumer = Consumer({**kafka_options, "group.id": f"g-{topic}"})
    [committed] = consumer.committed([TopicPartition(source_topic, 0)], timeout=10)
    assert committed.offset == 4
    consumer.close()
    [letter] = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in read_topic(kafka_options["bootstrap.servers"], dlq, 1)]
    assert (letter.reason, letter.offset) == ("zero_diff", 3)
    with ResultClient(topic, kafka_options) as client:
        assert client.wait_for(None, timeout=20)
        assert client.closed and client.frontier is None and client.view == {("a",): 1}


def test_protocol_violations_are_precise_errors(kafka_options, make_topic):
    raw = Producer(kafka_options)
    entry = pack_output_update(pack_record(("a",), "out"), 5, 1)
    cases = {
        "epochs are missing.*counts 2 updates, the topic holds 1": [
            encode_output_batch(T_MIN, 10, "i", [entry]), encode_output_progress(T_MIN, 10, "i", 2),
            encode_output_progress(10, 20, "i", 0)],
        "epochs are missing": [encode_output_progress(10, 20, "i", 0)],
        "not msgpack": [b"\xc1"],
        "time outside the epoch": [
            encode_output_batch(T_MIN, 5, "i", [entry]), encode_output_progress(T_MIN, 5, "i", 1)],
    }
    for message, values in cases.items():
        topic = make_topic("bad")
        for v in values:
            raw.produce(topic, v)
        raw.flush()
        with ResultClient(topic, kafka_options) as client:
            with pytest.raises(ProtocolError, match=message):
                client.catch_up(timeout=10)


def test_sink_options_name_the_key(kafka_options):
    with pytest.raises(OptionsError, match="max_batch_updates"):
        OutputSpec("o", "t", max_batch_updates=0)
    with pytest.raises(OptionsError, match="transactional_id"):
        KafkaSink([OutputSpec("o", "t")], kafka_options, transactions=True)
    with pytest.raises(OptionsError, match="share the topic"):
        KafkaSink([OutputSpec("o", "t"), OutputSpec("p", "t")], kafka_options)


def test_unknown_output_and_unencodable_record(kafka_options, make_topic):
    from ddflow.daemon.exceptions import WireError

    sink = sink_for(kafka_options, make_topic("out"), transactional_id=None)
    assert not sink.transactional
    with pytest.raises(OptionsError, match="unknown outputs"):
        sink.publish(T_MIN, 1, {"nope": []})
    with pytest.raises(WireError, match="output 'out'"):
        sink.publish(T_MIN, 1, {"out": [({1, 2}, 0, 1)]})
    sink.close()
    assert msgpack  # noqa


class _FakeMessage:
    def __init__(self, offset, value=None, eof=False):
        self._offset, self._value, self._eof = offset, value, eof

    def error(self):
        if not self._eof:
            return None
        from confluent_kafka import KafkaError as RdKafkaError

        return RdKafkaError(RdKafkaError._PARTITION_EOF)

    def topic(self):
        return "results"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def value(self):
        return self._value

    def headers(self):
        return None

    def key(self):
        return None


def test_catching_up_gives_up_after_a_stall_not_after_a_long_read():
    """A long result topic takes as long as it takes (a fixed 30 s deadline made every restart of
    a daemon with a long history fail); only 30 s without a message is an error. The clock is
    fake: each consume takes one second."""
    from ddflow.daemon.kafka.reading import Routes, catch_up

    now = [0.0]

    class Consumer:
        def __init__(self, messages):
            self.messages = messages

        def consume(self, num_messages, timeout):
            now[0] += 1.0
            return [self.messages.pop(0)] if self.messages else []

    lower, epochs = T_MIN, []
    for i, upper in enumerate(range(1, 101)):
        epochs.append(_FakeMessage(i, encode_output_progress(lower, upper, "x", 0)))
        lower = upper
    follower = _Follower("results", 1, keep_view=False, stats=ProtocolStats())
    routes = Routes([follower])
    catch_up(Consumer(epochs + [_FakeMessage(100, eof=True)]), routes, 30.0, clock=lambda: now[0])
    assert now[0] >= 100 and follower.partitions[0].final == 100 and routes.last == {("results", 0): 99}
    stalled = Routes([_Follower("results", 1, keep_view=False, stats=ProtocolStats())])
    now[0] = 0.0
    with pytest.raises(KafkaClientError, match=r"results\[0\].*nothing read for 30.0 s"):
        catch_up(Consumer(epochs[:5]), stalled, 30.0, clock=lambda: now[0])
    assert 35 <= now[0] <= 37


def test_a_poll_waits_for_the_first_message_not_for_a_full_batch(kafka_options, make_topic):
    """librdkafka's batch call waits its whole timeout unless the batch fills up, so a marker that
    just became final sat in the consumer for up to the poll's timeout (the demo polled with
    0.1 s: ~50 ms of its end-to-end latency). The client may wait for the first message only;
    every call that asks for a batch takes what is already there (timeout 0)."""
    topic = make_topic("out", partitions=2)
    sink = sink_for(kafka_options, topic)
    sink.publish(T_MIN, 10, {"out": [(("a", 1), 5, 1), (("b", 2), 7, 1)]})
    sink.close()
    calls = []

    class Recording:
        def __init__(self, consumer):
            self.consumer = consumer

        def consume(self, num_messages, timeout):
            messages = self.consumer.consume(num_messages=num_messages, timeout=timeout)
            calls.append((num_messages, timeout, len(messages)))
            return messages

    with ResultClient(topic, kafka_options) as client:
        real = client._consumer
        client._consumer = Recording(real)
        try:
            frontiers = []
            for _ in range(200):
                frontiers += [c.frontier for c in client.poll(5.0)]
                if frontiers and frontiers[-1] == 10:
                    break
        finally:
            client._consumer = real
    assert frontiers[-1] == 10 and client.view == {("a", 1): 1, ("b", 2): 1}
    waiting_for_a_batch = [c for c in calls if c[0] > 1 and c[1] > 0]
    assert calls and not waiting_for_a_batch, calls
