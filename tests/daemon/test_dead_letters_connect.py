"""Dead letters in Kafka Connect's convention, read by clients that know nothing of ddflow.

A bad input message's dead letter is the message itself (value and key byte for byte), with where
it came from and why in Connect's ``__connect.errors.*`` headers and ddflow's ``ddflow.*`` ones:
confluent-kafka's plain Consumer and Debian's kcat read the original bytes and the reasons. A
record a user function raised on has no single message: its value is the record as JSON.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from support.broker import create_topic, read_topic
from support.kcat import ensure_kcat, kcat_read

from ddflow.daemon.deadletter import DeadLetterWriter
from ddflow.daemon.input.source import InputSpec, KafkaSource
from ddflow.operators.errors import UserFunctionError

T_MIN = -(2**63)


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_dead_letters_are_the_original_messages_with_connect_headers(kcat_broker: str) -> None:
    ensure_kcat()
    bootstrap = kcat_broker
    tag = uuid.uuid4().hex[:6]
    topic, dlq = create_topic(bootstrap, f"views-{tag}", 1), create_topic(bootstrap, f"dlq-{tag}", 1)
    options = {"bootstrap.servers": bootstrap}
    sent = [  # (key, value, bad?)
        (b"user-7", js([[7, "home"], 100, 1]), False),
        (b"user-8", b"not json", True),  # the whole message is bad
        (None, js([[[8, "about"], 101, 1], [[9, "blog"], 101, 0]]), True),  # a batch: its 2nd update is bad
    ]
    raw = Producer(options)
    for key, value, _ in sent:
        raw.produce(topic, value, key=key)
    raw.flush()
    dead = DeadLetterWriter(dlq, lambda t, k, v, h: raw.produce(t, v, key=k, headers=h), worker=0, name=f"g-{tag}")
    spec = InputSpec("views", topic, fields={"user": "int", "page": "str"}, format="json")
    source = KafkaSource([spec], options, dead_letters=dead)
    source.open()
    try:
        updates: list[Any] = []
        deadline = time.monotonic() + 30
        while len(updates) < 2 or dead.written < 2:
            assert time.monotonic() < deadline, updates
            for ups in source.poll(T_MIN, timeout=0.05).updates.values():
                updates.extend(ups)
    finally:
        source.close()
    cause = ValueError("invalid literal for int() with base 10: 'x'")
    try:
        raise cause
    except ValueError:
        error = UserFunctionError(operator="map", function="parse", where="flows.py:12", record=("k", "x"), time=10)
        error.__cause__ = cause
    dead.write_failure(error)
    raw.flush()

    # confluent-kafka's plain consumer: the original bytes and the reasons, no ddflow decoder
    letters = read_topic(bootstrap, dlq, 1)
    assert [(m.key(), m.value()) for m in letters[:2]] == [(k, v) for k, v, bad in sent if bad]
    first = {n: v.decode() for n, v in letters[0].headers()}
    assert {n: first[n] for n in first if n.startswith("__connect.errors.") and n != "__connect.errors.class.name"} == {
        "__connect.errors.topic": topic, "__connect.errors.partition": "0", "__connect.errors.offset": "1",
        "__connect.errors.connector.name": f"g-{tag}", "__connect.errors.task.id": "0",
        "__connect.errors.stage": "VALUE_CONVERTER", "__connect.errors.exception.class.name": "bad_json",
        "__connect.errors.exception.message": first["__connect.errors.exception.message"]}
    assert first["__connect.errors.exception.message"] and first["ddflow.reason"] == "bad_json"
    assert first["ddflow.input"] == "views" and json.loads(first["ddflow.indexes"]) == {"bad_json": None}
    batch = {n: v.decode() for n, v in letters[1].headers()}
    assert (batch["__connect.errors.offset"], batch["ddflow.reason"]) == ("2", "zero_diff")
    assert json.loads(batch["ddflow.indexes"]) == {"zero_diff": [1]}  # the bad update's position
    assert json.loads(batch["ddflow.counts"]) == {"zero_diff": 1}

    # kcat, a client nobody here wrote, reads the same
    read = kcat_read(bootstrap, dlq)
    assert [(m["key"], m["payload"]) for m in read[:2]] == [("user-8", "not json"), (None, sent[2][1].decode())]
    headers = [dict(zip(m["headers"][::2], m["headers"][1::2])) for m in read]
    assert headers[0]["__connect.errors.exception.class.name"] == "bad_json"
    assert headers[0]["__connect.errors.topic"] == topic and headers[0]["__connect.errors.offset"] == "1"
    function = headers[2]
    assert json.loads(read[2]["payload"]) == ["k", "x"] and function["ddflow.value.format"] == "json"
    assert function["__connect.errors.stage"] == "TRANSFORMATION" and function["ddflow.time"] == "10"
    assert function["__connect.errors.exception.class.name"] == "builtins.ValueError"
    assert "ValueError: invalid literal" in function["__connect.errors.exception.stacktrace"]
    assert "__connect.errors.topic" not in function  # no single input message


def test_a_restart_that_reads_the_input_again_does_not_write_its_dead_letters_again(kafka_options, make_topic):
    """Without a checkpoint a restarted worker reads its input from the beginning: the messages
    below the group's committed offsets had their dead letters committed with those offsets, so
    they are not written again; a bad message after them is."""
    from ddflow.daemon.factory import kafka_worker
    from ddflow.daemon.input.progress import EpochPolicy
    from ddflow.daemon.kafka.producer import UpdateProducer
    from ddflow.daemon.output.sink import OutputSpec

    inp, out, dlq = make_topic("a"), make_topic("out"), make_topic("dlq")

    def worker():
        return kafka_worker(lambda df, inputs: {"out": inputs["a"]}, [InputSpec("a", inp, fields=["k"])],
                            [OutputSpec("out", out)], kafka_options, group_id=f"g-{inp}", dead_letter_topic=dlq,
                            epochs=EpochPolicy(resolution_ns=10))

    raw = Producer(kafka_options)
    with UpdateProducer(inp, kafka_options) as p:
        p.insert(("x",), 5)
    raw.produce(inp, b"\xc1 first", key=b"one")
    raw.flush()
    with UpdateProducer(inp, kafka_options) as p:
        p.advance_to(20)
    first = worker()
    first.run(until=20, timeout=60)
    raw.produce(inp, b"\xc1 second", key=b"two")
    raw.flush()
    with UpdateProducer(inp, kafka_options) as p:
        p.advance_to(40)
    again = worker()
    again.run(until=40, timeout=60)
    assert again.sink.dead_letters.replayed == 1  # the first bad message, read again
    letters = read_topic(kafka_options["bootstrap.servers"], dlq, 1)
    assert [(m.key(), m.value()) for m in letters] == [(b"one", b"\xc1 first"), (b"two", b"\xc1 second")]
