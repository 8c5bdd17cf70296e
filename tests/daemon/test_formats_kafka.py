"""The json and debezium formats on the real broker: sources decode them (bad messages
dead-lettered with their reasons, tombstones counted, nothing else lost), sinks write change
events plus a companion progress topic, and the result client gets exact views from them even
with re-sent epochs, aborted transactions and restarts."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from ddflow.daemon.output.commits import Window
from ddflow.daemon.deadletter import DeadLetterWriter, decode_dead_letter
from ddflow.daemon.exceptions import OptionsError
from ddflow.daemon.kafka.results import ResultClient, read_final_frontiers
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.daemon.input.source import InputSpec, KafkaSource
from ddflow.daemon.observe.stats import Stats
from ddflow.operators.lattice import T_MIN
from ddflow.daemon.factory import kafka_worker
from support.broker import read_topic
from test_source import drain  # type: ignore[import-not-found]

pytestmark = pytest.mark.kafka

FIELDS = {"page": "str", "views": "int"}


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def random_epochs(seed: int, bounds: list[int]) -> list[tuple[int, int, list[tuple[Any, int, int]]]]:
    rng = random.Random(seed)
    epochs, lower = [], T_MIN
    for upper in bounds:
        lo = max(lower, 0)
        ups = [((f"p{rng.randrange(8)}", rng.randrange(3)), rng.randrange(lo, upper), rng.choice([1, -1, 2]))
               for _ in range(rng.randrange(0, 40))]
        epochs.append((lower, upper, ups))
        lower = upper
    return epochs


def accumulate(updates: list[tuple[Any, int, int]], below: int) -> dict[Any, int]:
    view: Counter[Any] = Counter()
    for record, t, diff in updates:
        if t < below:
            view[record] += diff
    return {r: c for r, c in view.items() if c}


def sink_for(kafka_options: dict[str, Any], fmt: str, topic: str, progress: str, **kwargs: Any) -> KafkaSink:
    kwargs.setdefault("transactional_id", f"tx-{topic}")
    spec = OutputSpec("out", topic, format=fmt, fields=FIELDS, progress_topic=progress)
    sink = KafkaSink([spec], kafka_options, **kwargs)
    sink.open()
    return sink


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_change_events_and_progress_topic_give_the_exact_view_at_every_frontier(kafka_options, make_topic, fmt):
    topic, progress = make_topic("out", partitions=3), make_topic("progress", partitions=2)
    epochs = random_epochs(1, [10, 20, 35, 50, 51, 80])
    all_updates = [u for _, _, ups in epochs for u in ups]
    sink = sink_for(kafka_options, fmt, topic, progress)
    assert sink.transactional
    for lower, upper, ups in epochs:
        sink.publish(lower, upper, {"out": ups})
    sink.close()
    with ResultClient(topic, kafka_options, format=fmt, progress_topic=progress, fields=FIELDS) as client:
        seen = []
        for change in client.changes(timeout=30):
            seen.append(change.frontier)
            assert client.view == accumulate(all_updates, change.frontier)
            if change.frontier == 80:
                break
    assert seen[-1] == 80 and seen == sorted(seen)
    assert client.stats.epochs == 3 * len(epochs) and client.stats.incomplete_epochs == 0
    # the data topic holds only change events, keyed by the record's key field, each key on one
    # partition; the markers are all on the progress topic
    for msg in read_topic(kafka_options["bootstrap.servers"], topic, 3):
        if msg.value() is None:  # a debezium delete's tombstone
            assert fmt == "debezium"
            continue
        value, key = json.loads(msg.value()), json.loads(msg.key())
        assert set(key) == {"page"}
        if fmt == "json":
            assert set(value) == {"page", "views", "time", "diff"} and value["page"] == key["page"]
        else:
            assert value["op"] in ("c", "u", "d") and {"before", "after", "ts_ms", "ts_ns", "source"} <= set(value)
            row = value["after"] or value["before"]
            assert row["page"] == key["page"]
    markers = [json.loads(m.value()) for m in read_topic(kafka_options["bootstrap.servers"], progress, 2)]
    assert len(markers) == 3 * len(epochs) and {m["topic"] for m in markers} == {topic}


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_aborted_and_re_sent_epochs_count_once_and_restarts_resume(kafka_options, make_topic, fmt):
    topic, progress = make_topic("out", partitions=2), make_topic("progress")
    good = random_epochs(3, [10, 20, 30])
    sink = sink_for(kafka_options, fmt, topic, progress)
    sink.publish(*good[0][:2], {"out": good[0][2]})
    # attempts whose transactions abort (tansu still shows their records): one cut short after
    # half its data messages plus junk, no marker; one complete with its markers (the output is
    # deterministic, so a complete attempt holds the same updates); then the sink's retry under a
    # new incarnation commits
    producer = sink.producer
    junk = sink._encode(10, 20, {"out": [(("junk", 0), 12, 1)]})[0][0]
    messages, _, _ = sink._encode(10, 20, {"out": good[1][2]})
    data = [m for m in messages if m[0] == topic]
    sink.incarnation = "aborted-complete"
    for attempt in (data[: len(data) // 2] + [junk], sink._reincarnate(messages, sink.incarnation)):
        producer.begin_transaction()
        for t, p, key, value, headers in attempt:
            producer.produce(t, value, key=key, headers=headers, **({} if p is None else {"partition": p}))
        producer.flush()
        producer.abort_transaction(10)
    messages, _, _ = sink._encode(10, 20, {"out": good[1][2]})
    sink.incarnation = "second-attempt"
    retried = sink._reincarnate(messages, sink.incarnation)
    assert all(b"second-attempt" in (m[4][0][1] if m[4] else m[3]) for m in retried)
    sink._commit(Window(retried, lower=10, upper=20, epochs=1, extra={"staged": []}), None, None)
    sink.close()
    assert read_final_frontiers([topic], kafka_options, formats={topic: (fmt, progress)}) == {topic: [20, 20]}
    # a restarted sink reads the topics back and publishes only what is not final yet
    restarted = sink_for(kafka_options, fmt, topic, progress)
    assert restarted.final[topic] == [20, 20]
    restarted.publish(T_MIN, 20, {"out": good[0][2] + good[1][2]})
    restarted.publish(20, 30, {"out": good[2][2]})
    restarted.close()
    assert restarted.stats.output("out").suppressed_updates == len(good[0][2]) + len(good[1][2])
    all_updates = [u for _, _, ups in good for u in ups]
    with ResultClient(topic, kafka_options, format=fmt, progress_topic=progress, fields=FIELDS) as client:
        assert client.wait_for(30, timeout=30)
        assert client.view == accumulate(all_updates, 30) and ("junk", 0) not in client.view
        assert client.stats.dropped_updates >= 1  # the aborted attempts' records


def test_result_client_format_options_are_checked(kafka_options, make_topic):
    topic = make_topic("out")
    with pytest.raises(OptionsError, match="needs its progress_topic"):
        ResultClient(topic, kafka_options, format="json").open()
    with pytest.raises(OptionsError, match="msgpack output keeps its markers in its own topic"):
        ResultClient(topic, kafka_options, progress_topic="p").open()
    with pytest.raises(OptionsError, match="'avro' is not one of"):
        ResultClient(topic, kafka_options, format="avro")


def test_debezium_source_decodes_events_counts_tombstones_and_dead_letters_the_rest(kafka_options, make_topic):
    topic, dlq = make_topic("in", partitions=2), make_topic("dlq")
    ms = 1_700_000_000_000
    row = {"id": 1, "page": "home", "title": "Home", "extra": [1, 2]}
    new = {"id": 1, "page": "home", "title": "Start"}
    envelope = {"schema": {"type": "struct", "optional": False, "fields": []}}
    good = [
        (0, {"before": None, "after": row, "op": "r", "ts_ms": ms}),
        (0, {**envelope, "payload": {"before": row, "after": new, "op": "u", "ts_ms": ms + 1}}),
        (1, {"before": None, "after": {"id": 2, "page": "about", "title": "About"}, "op": "c", "ts_ms": ms + 2,
             "ts_ns": (ms + 2) * 1_000_000 + 5}),
        (1, {"before": {"id": 2, "page": "about", "title": "About"}, "after": None, "op": "d", "ts_ms": ms + 3}),
    ]
    bad = {
        "bad_json": (0, b"{\"op\": "),
        "shape": (0, js(["c", row])),
        "bad_event": (1, js({"before": None, "after": None, "op": "u", "ts_ms": ms})),
        "missing_field": (1, js({"before": None, "after": {"id": 3, "page": "x"}, "op": "c", "ts_ms": ms})),
        "field_type": (0, js({"before": None, "after": {"id": "3", "page": "x", "title": "X"}, "op": "c",
                              "ts_ms": ms})),
        "time_type": (1, js({"before": None, "after": row, "op": "c", "ts_ms": "now"})),
        "field_range": (1, js({"before": None, "after": {"id": 2**70, "page": "x", "title": "X"}, "op": "c",
                               "ts_ms": ms})),  # accepted, it would stop every later epoch's publishing
        "empty": (0, b""),
    }
    raw = Producer(kafka_options)
    for p, event in good:
        raw.produce(topic, js(event), partition=p)
    for p, value in bad.values():
        raw.produce(topic, value, partition=p)
    raw.produce(topic, None, key=b'{"id":2}', partition=1)  # the tombstone after the delete
    raw.flush()
    dlp = Producer(kafka_options)
    stats = Stats()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: dlp.produce(t, v, key=k, headers=h), stats=stats)
    spec = InputSpec("pages", topic, fields={"id": "int", "page": "str", "title": "str"}, format="debezium",
                     policy="monotonic")
    source = KafkaSource([spec], kafka_options, dead_letters=dead, stats=stats)
    source.open()
    try:
        t = ms * 1_000_000
        expected = [((1, "home", "Home"), t, 1), ((1, "home", "Home"), t + 1_000_000, -1),
                    ((1, "home", "Start"), t + 1_000_000, 1), ((2, "about", "About"), t + 2_000_005, 1),
                    ((2, "about", "About"), t + 3_000_000, -1)]
        ups = drain(source, T_MIN, lambda ups: len(ups) >= len(expected)
                    and sum(stats.input("pages").dead_letters.values()) == len(bad)
                    and stats.input("pages").tombstones == 1)
        assert sorted(ups) == sorted(expected)
        dlp.flush()
        messages = read_topic(kafka_options["bootstrap.servers"], dlq, 1)
        letters = {x.reason: x for x in (decode_dead_letter(m.value(), m.headers(), m.key()) for m in messages)}
        # Kafka Connect's dead-letter headers, readable by any client without ddflow
        connect = {h[0]: h[1].decode() for m in messages for h in (m.headers() or [])
                   if decode_dead_letter(m.value(), m.headers()).reason == "field_range"
                   and h[0].startswith("__connect.errors.")}
        assert connect == {"__connect.errors.topic": topic, "__connect.errors.partition": "1",
                           "__connect.errors.offset": str(letters["field_range"].offset),
                           "__connect.errors.stage": "VALUE_CONVERTER",
                           "__connect.errors.class.name": f"{type(spec.decoder).__module__}."
                                                          f"{type(spec.decoder).__qualname__}",
                           "__connect.errors.exception.class.name": "field_range",
                           "__connect.errors.exception.message": letters["field_range"].detail}
        assert set(letters) == set(bad)
        for reason, (partition, value) in bad.items():
            letter = letters[reason]
            assert (letter.topic, letter.partition, letter.raw, letter.index) == (topic, partition, value, None)
        assert "op 'u' without a 'before' row" in letters["bad_event"].detail
        assert stats.input("pages").updates == len(expected)
    finally:
        source.close()


def test_json_source_keeps_the_good_updates_of_a_partly_bad_batch(kafka_options, make_topic):
    topic, dlq = make_topic("in"), make_topic("dlq")
    raw = Producer(kafka_options)
    raw.produce(topic, js([[7, "home"], 100, 1]))
    raw.produce(topic, js([{"user": 8, "page": "about", "time": 101, "diff": 1}, {"user": 9, "time": 101, "diff": 1},
                           [[10, "blog"], 102, 0], [[11, "blog"], 103, -1]]))
    raw.produce(topic, js({"progress": 200}))
    raw.produce(topic, b"not json")
    raw.flush()
    dlp = Producer(kafka_options)
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: dlp.produce(t, v, key=k, headers=h))
    source = KafkaSource([InputSpec("views", topic, fields={"user": "int", "page": "str"}, format="json")],
                         kafka_options, dead_letters=dead)
    source.open()
    try:
        ups = drain(source, T_MIN, lambda ups: len(ups) == 3 and source.frontier() == 200)
        assert sorted(ups) == [((7, "home"), 100, 1), ((8, "about"), 101, 1), ((11, "blog"), 103, -1)]
        dlp.flush()
        letters = [decode_dead_letter(m.value(), m.headers(), m.key()) for m in read_topic(kafka_options["bootstrap.servers"], dlq, 1)]
        assert [(x.offset, x.counts, x.indexes) for x in letters] == [
            (1, {"missing_field": 1, "zero_diff": 1}, {"missing_field": [1], "zero_diff": [2]}),
            (3, {"bad_json": 1}, {"bad_json": None})]
    finally:
        source.close()


def test_debezium_inputs_refuse_explicit_progress():
    with pytest.raises(OptionsError, match="input 'pages' policy: a debezium input has no progress markers"):
        InputSpec("pages", "t", fields=["id"], format="debezium")


def test_a_deleted_progress_topic_stops_the_worker_naming_it(kafka_options, make_topic):
    from confluent_kafka.admin import AdminClient

    source, out, progress = make_topic("in"), make_topic("out"), make_topic("progress")
    spec = OutputSpec("views", out, format="json", fields=["page", "views"], progress_topic=progress)
    worker = kafka_worker(lambda df, inputs: {"views": inputs["in"]}, [InputSpec("in", source, fields=["page", "views"])],
                          [spec], kafka_options, group_id=f"g-{source}", watch_interval=60)
    with worker:
        assert worker.watch.topics[progress] == "progress topic of output 'views'"
        assert worker.watch.check() is None
        admin = AdminClient(kafka_options)
        for future in admin.delete_topics([progress], operation_timeout=10).values():
            future.result(10)
        problem = worker.watch.check()
    assert problem is not None and progress in problem and "progress topic of output 'views'" in problem
