"""Sources on the real broker: producer helper, progress policies, late data, dead letters."""

from __future__ import annotations

import time

import msgpack
import pytest
from confluent_kafka import Producer

from ddflow.daemon.deadletter import DeadLetterWriter, decode_dead_letter
from ddflow.daemon.exceptions import OptionsError, WireError
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.input.source import InputSpec, KafkaSource
from ddflow.daemon.observe.stats import Stats
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.formats.msgpack import encode_progress, encode_update, encode_updates
from support.broker import read_topic

pytestmark = pytest.mark.kafka


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def drain(source, frontier, until, timeout=15.0):
    """Poll until ``until(updates_so_far)`` holds; returns all updates read."""
    updates = []
    deadline = time.monotonic() + timeout
    while True:
        polled = source.poll(frontier, timeout=0.05)
        for ups in polled.updates.values():
            updates.extend(ups)
        if until(updates):
            return updates
        assert time.monotonic() < deadline, f"condition not reached; read {len(updates)} updates"


def test_explicit_policy_frontier_is_the_meet_of_partition_markers(kafka_options, make_topic):
    topic = make_topic("in", partitions=3)
    with UpdateProducer(topic, kafka_options, batch_size=4) as producer:
        for i in range(30):
            producer.insert((i, i + 1), 10 + i)
        producer.advance_to(100)
    source = KafkaSource([InputSpec("edges", topic, fields=["src", "dst"])], kafka_options)
    source.open()
    try:
        updates = drain(source, T_MIN, lambda ups: len(ups) == 30 and source.frontier() == 100)
        assert sorted(updates) == [((i, i + 1), 10 + i, 1) for i in range(30)]
        stats = source.stats.input("edges")
        assert stats.updates == 30 and stats.progress_markers == 3
        assert {p.frontier for p in stats.partitions.values()} == {100}
        positions = {p: o for (t, p), o in source.next_offsets().items() if t == topic}
        assert set(positions) == {0, 1, 2} and all(o > 0 for o in positions.values())
    finally:
        source.close()


def test_explicit_policy_waits_for_every_partition(kafka_options, make_topic):
    topic = make_topic("in", partitions=2)
    raw = Producer(kafka_options)
    raw.produce(topic, encode_progress(50), partition=0)
    raw.flush()
    source = KafkaSource([InputSpec("x", topic)], kafka_options)
    source.open()
    try:
        drain(source, T_MIN, lambda _: source.stats.input("x").progress_markers == 1)
        assert source.frontier() == T_MIN  # partition 1 has promised nothing
        raw.produce(topic, encode_progress(70), partition=1)
        raw.flush()
        drain(source, T_MIN, lambda _: source.frontier() == 50)
    finally:
        source.close()


def test_monotonic_idle_partition_stops_holding_and_late_update_advances(kafka_options, make_topic):
    topic = make_topic("in", partitions=2)
    raw = Producer(kafka_options)
    for t in (10, 20, 50):
        raw.produce(topic, encode_update([t], t, 1), partition=0)
    raw.flush()
    spec = InputSpec("x", topic, policy="monotonic", idle_timeout=0.3, late="advance")
    source = KafkaSource([spec], kafka_options)
    source.open()
    try:
        drain(source, T_MIN, lambda ups: len(ups) == 3)
        # both partitions idle at their end: what was seen (up to 50) becomes complete
        drain(source, T_MIN, lambda _: source.frontier() == 51, timeout=10)
        assert source.bounds()["x"].holds is False
        raw.produce(topic, encode_update([7], 7, 1), partition=1)  # behind the engine's frontier 51
        raw.produce(topic, encode_update([60], 60, 1), partition=1)
        raw.flush()
        late = drain(source, 51, lambda ups: len(ups) == 2)
        assert late == [((7,), 51, 1), ((60,), 60, 1)]
        assert source.stats.input("x").late == {"advance": 1, "reject": 0}
        # partition 1 is active again and holds at 60 while partition 0 stays idle
        assert source.frontier() == 60
    finally:
        source.close()


def test_monotonic_partition_without_idle_timeout_holds_forever(kafka_options, make_topic):
    topic = make_topic("in", partitions=2)
    raw = Producer(kafka_options)
    raw.produce(topic, encode_update([1], 40, 1), partition=0)
    raw.flush()
    source = KafkaSource([InputSpec("x", topic, policy="monotonic")], kafka_options)
    source.open()
    try:
        drain(source, T_MIN, lambda ups: len(ups) == 1)
        time.sleep(0.5)
        source.poll(T_MIN, timeout=0.05)
        assert source.frontier() == T_MIN
    finally:
        source.close()


def test_reclock_assigns_arrival_times(kafka_options, make_topic):
    topic = make_topic("in", partitions=2)
    with UpdateProducer(topic, kafka_options) as producer:
        for i in range(10):
            producer.insert((i,), 5)  # the producer's times are ignored
        producer.advance_to(10)
    raw = Producer(kafka_options)
    raw.produce(topic, pack([[99], None, 1]), partition=1)  # reclocked inputs may omit the time
    raw.flush()
    source = KafkaSource([InputSpec("x", topic, policy="reclock")], kafka_options)
    source.open()
    try:
        before = time.time_ns()
        ups = drain(source, T_MIN, lambda ups: len(ups) == 11)
        after = time.time_ns()
        assert all(before <= t <= after for _, t, _ in ups)
        assert source.stats.input("x").ignored_progress_markers == 2
        assert source.frontier() >= max(t for _, t, _ in ups)
    finally:
        source.close()


def test_late_reject_dead_letters_the_update(kafka_options, make_topic):
    topic, dlq = make_topic("in"), make_topic("dlq")
    raw = Producer(kafka_options)
    raw.produce(topic, encode_updates([([1], 5, 1), ([2], 500, 1)]), partition=0)
    raw.flush()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: raw.produce(t, v, key=k, headers=h))
    source = KafkaSource([InputSpec("x", topic, late="reject")], kafka_options, dead_letters=dead)
    source.open()
    try:
        ups = drain(source, 100, lambda ups: len(ups) == 1)
        assert ups == [((2,), 500, 1)]
        raw.flush()
        [msg] = read_topic(kafka_options["bootstrap.servers"], dlq, 1)
        letter = decode_dead_letter(msg.value(), msg.headers(), msg.key())
        assert (letter.reason, letter.topic, letter.partition, letter.offset, letter.index) == ("late", topic, 0, 0, 0)
        assert source.stats.input("x").late == {"advance": 0, "reject": 1}
    finally:
        source.close()


def test_every_malformed_class_is_dead_lettered_and_good_messages_survive(kafka_options, make_topic):
    topic, dlq = make_topic("in", partitions=2), make_topic("dlq")
    bad = {
        "empty": b"",
        "oversized": encode_update(["x" * 300, 1], 1, 1),
        "bad_msgpack": b"\xc1\xc1",
        "shape": pack("not an update"),
        "arity": pack([["a", 1, 2], 1, 1]),
        "field_type": pack([["a", "b"], 1, 1]),
        "time_type": pack([["a", 1], "noon", 1]),
        "time_range": pack([["a", 1], 2**63, 1]),
        "diff_type": pack([["a", 1], 1, 0.5]),
        "zero_diff": pack([["a", 1], 1, 0]),
        "diff_range": pack([["a", 1], 1, 2**63]),
        "bad_progress": pack({"progress": "later"}),
    }
    raw = Producer(kafka_options)
    expected_good = []
    where = {}
    for i, (reason, value) in enumerate(bad.items()):
        partition = i % 2
        good = (f"k{i}", i)
        raw.produce(topic, encode_update(list(good), 100 + i, 1), partition=partition)
        expected_good.append((good, 100 + i, 1))
        raw.produce(topic, value, partition=partition)
        where[reason] = (partition, value)
    # one batch with a bad update in the middle: the two good ones are kept
    raw.produce(topic, pack([[["m", 1], 200, 1], [["m", 2], 200, 0], [["m", 3], 201, 2]]), partition=0)
    expected_good += [(("m", 1), 200, 1), (("m", 3), 201, 2)]
    raw.flush()
    dlp = Producer(kafka_options)
    stats = Stats()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: dlp.produce(t, v, key=k, headers=h), stats=stats)
    spec = InputSpec("kv", topic, fields={"key": "str", "val": "int"}, max_message_bytes=256)
    source = KafkaSource([spec], kafka_options, dead_letters=dead, stats=stats)
    source.open()
    try:
        ups = drain(source, T_MIN, lambda ups: len(ups) == len(expected_good))
        assert sorted(ups) == sorted(expected_good)
        dlp.flush()
        letters = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in read_topic(kafka_options["bootstrap.servers"], dlq, 1)]
        assert len(letters) == len(bad) + 1
        by_reason = {letter.reason: letter for letter in letters if letter.index is None}
        assert set(by_reason) == set(bad)
        for reason, (partition, value) in where.items():
            letter = by_reason[reason]
            assert (letter.input, letter.topic, letter.partition) == ("kv", topic, partition)
            assert letter.raw == value and letter.raw_size == len(value) and letter.detail
            # the offset points at the bad message itself
            assert letter.offset % 2 == 1
        [batch_letter] = [letter for letter in letters if letter.index is not None]
        assert (batch_letter.reason, batch_letter.index, batch_letter.partition) == ("zero_diff", 1, 0)
        counts = stats.input("kv").dead_letters
        assert counts["zero_diff"] == 2 and sum(counts.values()) == len(bad) + 1
    finally:
        source.close()


def test_producer_helper_rejects_what_breaks_its_promise(kafka_options, make_topic):
    topic = make_topic("in")
    producer = UpdateProducer(topic, kafka_options)
    producer.advance_to(10)
    with pytest.raises(WireError, match="behind the progress 10"):
        producer.insert((1,), 5)
    with pytest.raises(WireError, match="diff 0"):
        producer.send((1,), 20, 0)
    with pytest.raises(WireError, match="previous marker 10"):
        producer.advance_to(3)
    with pytest.raises(WireError, match="cannot be encoded"):
        producer.insert(object(), 20)
    producer.flush()
    with pytest.raises(OptionsError, match="markers"):
        UpdateProducer(topic, kafka_options, markers="some")


def test_producer_marks_only_written_partitions_when_asked(kafka_options, make_topic):
    topic = make_topic("in", partitions=4)
    with UpdateProducer(topic, kafka_options, markers="written") as producer:
        producer.insert(("only",), 1)
        producer.advance_to(5)
    messages = read_topic(kafka_options["bootstrap.servers"], topic, 4)
    partitions = {m.partition() for m in messages}
    assert len(partitions) == 1 and len(messages) == 2


def test_source_options_name_the_key(kafka_options):
    with pytest.raises(OptionsError, match="late"):
        InputSpec("x", "t", late="drop")
    with pytest.raises(OptionsError, match="idle_timeout"):
        InputSpec("x", "t", policy="explicit", idle_timeout=1.0)
    with pytest.raises(OptionsError, match="input 'x'.*fields"):
        InputSpec("x", "t", fields={"a": "complex"})
    with pytest.raises(OptionsError, match="share the topic 't'"):
        KafkaSource([InputSpec("x", "t"), InputSpec("y", "t")], kafka_options)
    with pytest.raises(OptionsError, match="bootstrap.servers"):
        KafkaSource([InputSpec("x", "t")], {})


def read_letters(kafka_options, dlq):
    """(size, dead letter) of each dead letter on ``dlq``: the size counts value, key and headers."""
    def size(m):
        return len(m.value() or b"") + len(m.key() or b"") + sum(len(n) + len(v or b"") for n, v in m.headers() or ())

    return [(size(m), decode_dead_letter(m.value(), m.headers(), m.key()))
            for m in read_topic(kafka_options["bootstrap.servers"], dlq, 1)]


def test_late_updates_mixed_with_invalid_ones_carry_their_position_in_the_message(kafka_options, make_topic):
    topic, dlq = make_topic("in"), make_topic("dlq")
    raw = Producer(kafka_options)
    messages = [
        pack([[["a", 1], 5, 0], [["b", 2], 5, 1]]),  # [zero-diff, late]
        pack([[["a", 1], 5, 0], [["b", 2], 5, 1], [["c", 3], 500, 1]]),  # [zero-diff, late, good]
        pack([[["d", 4], 500, 1], [["e", 5], 6, 1], [["f", 6], 7, 0], [["g", 7], 8, 1]]),  # [good, late, zero, late]
        pack([["h", 8], 9, 1]),  # a single late update: the whole message
    ]
    for value in messages:
        raw.produce(topic, value, partition=0)
    raw.flush()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: raw.produce(t, v, key=k, headers=h))
    source = KafkaSource([InputSpec("kv", topic, fields={"key": "str", "val": "int"}, late="reject")], kafka_options,
                         dead_letters=dead)
    source.open()
    try:
        ups = drain(source, 100, lambda ups: len(ups) == 2)
        assert sorted(ups) == [(("c", 3), 500, 1), (("d", 4), 500, 1)]
        raw.flush()
        letters = [letter for _, letter in read_letters(kafka_options, dlq)]
        assert [letter.offset for letter in letters] == [0, 1, 2, 3]  # one dead letter per message
        assert [letter.bad() for letter in letters] == [
            [(0, "zero_diff"), (1, "late")],
            [(0, "zero_diff"), (1, "late")],
            [(1, "late"), (2, "zero_diff"), (3, "late")],
            [(None, "late")],
        ]
        assert all(letter.raw == value for letter, value in zip(letters, messages))
        assert letters[2].counts == {"late": 2, "zero_diff": 1}
        assert "behind its partition's frontier 100" in letters[2].details["late"]
        assert source.stats.input("kv").late == {"advance": 0, "reject": 5}
    finally:
        source.close()


def test_a_message_is_dead_lettered_once_whatever_its_number_of_bad_updates(kafka_options, make_topic):
    """A message of 2,000 zero-diff updates (~88 KB) once produced 2,000 dead letters each holding
    the whole message (131 MB). Now: one dead letter with the raw message once, every position, and
    a size bounded whatever the message."""
    topic, dlq = make_topic("in"), make_topic("dlq")
    zeros = pack([[[f"key-{i:032d}", i], i, 0] for i in range(2000)])
    many = pack([[["k", 1], 1, 0]] * 100_000 + [[["ok", 1], 1, 1]])  # 100,000 bad updates, 700 KB
    wide = pack([[["y", "x" * 200_000], 1, 1], [["y", "not an int"], 1, 1]])  # details with huge values
    assert len(zeros) > 85_000 and len(many) > 650_000
    raw = Producer({**kafka_options, "message.max.bytes": 4 << 20})
    for value in (zeros, many, wide):
        raw.produce(topic, value, partition=0)
    raw.flush()
    stats = Stats()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: raw.produce(t, v, key=k, headers=h), stats=stats)
    spec = InputSpec("kv", topic, fields={"key": "str", "val": "int"}, max_message_bytes=2 << 20)
    source = KafkaSource([spec], kafka_options, dead_letters=dead, stats=stats,
                         consumer_options={"fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 4 << 20})
    source.open()
    try:
        drain(source, T_MIN, lambda ups: len(ups) == 1)
        raw.flush()
        letters = read_letters(kafka_options, dlq)
        assert len(letters) == 3
        sizes = [size for size, _ in letters]
        assert all(size <= dead.max_bytes for size in sizes), sizes
        assert dead.max_bytes <= 1_000_000  # within librdkafka's default message.max.bytes
        (_, zero_letter), (_, many_letter), (_, wide_letter) = letters
        assert zero_letter.raw == zeros and zero_letter.raw_size == len(zeros)  # the message as it came
        assert many_letter.raw == many and sizes[1] < len(many) + 70_000  # headers: ~64 KB at most
        assert zero_letter.indexes == {"zero_diff": list(range(2000))} and zero_letter.complete
        assert many_letter.counts == {"zero_diff": 100_000} and not many_letter.complete
        assert many_letter.indexes["zero_diff"] == list(range(10_000))
        assert wide_letter.bad() == [(0, "field_type"), (1, "field_type")]
        assert len(wide_letter.details["field_type"]) <= 256
        assert sum(sizes) < len(zeros) + len(many) + len(wide) + 3 * 70_000  # was 2,000 x 88 KB for the first alone
        assert stats.input("kv").dead_letters == {"zero_diff": 102_000, "field_type": 2}
    finally:
        source.close()


def test_workers_split_the_partitions_and_each_frontier_is_the_meet_over_its_own(kafka_options, make_topic):
    """Worker i of W is assigned the partitions p % W == i (no group rebalancing); its frontier is the
    meet over those only, and a malformed message is dead-lettered by the worker reading its partition."""
    topic, dlq = make_topic("in", partitions=4), make_topic("dlq")
    raw = Producer(kafka_options)
    for p in range(4):
        raw.produce(topic, encode_updates([([p], 10 + p, 1)]), partition=p)
        raw.produce(topic, encode_progress(100 + p), partition=p)
    raw.produce(topic, b"\xc1", partition=3)  # not msgpack
    raw.flush()
    letters: list = []
    sources = [KafkaSource([InputSpec("x", topic)], kafka_options, worker=(i, 2),
                           dead_letters=DeadLetterWriter(dlq, lambda t, k, v, h: letters.append((v, h, k))))
               for i in range(2)]
    try:
        for source in sources:
            source.open()
        got = [drain(s, T_MIN, lambda ups, s=s: len(ups) == 2 and s.frontier() is not None
                     and s.frontier() > T_MIN) for s in sources]
        assert sorted(got[0]) == [((0,), 10, 1), ((2,), 12, 1)] and sorted(got[1]) == [((1,), 11, 1), ((3,), 13, 1)]
        assert [s.frontier() for s in sources] == [100, 101]
        assert [sorted(p for _, p in s.next_offsets()) for s in sources] == [[0, 2], [1, 3]]
        assert [sorted(s.stats.input("x").partitions) for s in sources] == [[0, 2], [1, 3]]
        drain(sources[1], T_MIN, lambda _: len(letters) == 1)
        assert decode_dead_letter(*letters[0]).partition == 3 and sources[0].stats.input("x").dead_letters["malformed"] == 0
        assert all(s.holds_partitions for s in sources)
        lone = KafkaSource([InputSpec("x", topic)], kafka_options, worker=(5, 6))  # a worker with no partition
        lone.open()
        try:
            assert not lone.holds_partitions and lone.frontier() is None and lone.next_offsets() == {}
        finally:
            lone.close()
    finally:
        for source in sources:
            source.close()


def test_a_worker_index_outside_the_count_is_refused(kafka_options):
    with pytest.raises(OptionsError, match="worker"):
        KafkaSource([InputSpec("x", "t")], kafka_options, worker=(2, 2))
