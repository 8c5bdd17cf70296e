"""``ddflow produce --format msgpack|json|debezium`` and ``ddflow tail`` for dead letters, on the
real broker: what ``produce`` writes is what the input's own decoder reads without a dead letter
(the format defaulting to the configured input's), keyed messages land where the input's
partitioner says, and ``tail --dead-letters`` prints what the dead-letter writer wrote."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.broker import read_topic

from ddflow.daemon.deadletter import DeadLetterWriter
from ddflow.daemon.formats import decoder
from ddflow.daemon.formats.partitioners import kafka_partition
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.types import Malformed
from ddflow.daemon.cli.parser import main
from ddflow.daemon.kafka.broker import EmbeddedBroker

pytestmark = pytest.mark.kafka

FIELDS = {"user": "int", "page": "str"}
LINES = "\n".join(["[[7, \"/home\"], 10, 1]", "[[8, \"/cart\"], 11, 2]", "[[[7, \"/home\"], 12, -1]]", ""])
SENT = [((7, "/home"), 10, 1), ((8, "/cart"), 11, 2), ((7, "/home"), 12, -1)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``ddflow ARGV`` in this process (the commands as the console script runs them)."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def produce(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> str:
    path = tmp_path / "updates.jsonl"
    path.write_text(LINES, encoding="utf-8")
    code, _, err = run(capsys, "produce", *argv, str(path))
    assert code == 0, err
    return err


def read_back(bootstrap: str, topic: str, partitions: int, fmt: str, **kw: object) -> tuple[list, list, list]:
    """(updates, progress times, messages) as the input's decoder reads the topic; no dead letter."""
    decode = decoder(fmt, InputFormat(FIELDS), **kw)  # type: ignore[arg-type]
    updates, progress, messages = [], [], read_topic(bootstrap, topic, partitions)
    for msg in messages:
        d = decode.decode(msg.value())
        assert not d.malformed, (msg.value(), d.malformed)
        updates += d.updates
        if d.progress is not None:
            progress.append(d.progress)
    return updates, progress, messages


def config(tmp_path: Path, bootstrap: str, topic: str, fmt: str, extra: str = "") -> Path:
    path = tmp_path / "daemon.toml"
    path.write_text(textwrap.dedent(f"""
        [dataflow]
        function = "ddflow.config.dataflows:page_counts"
        [kafka]
        bootstrap = "{bootstrap}"
        [[inputs]]
        name = "views"
        topic = "{topic}"
        fields = {{ user = "int", page = "str" }}
        format = "{fmt}"
        {extra}
        [[outputs]]
        name = "page_views"
        topic = "page-views"
        """), encoding="utf-8")
    return path


def test_produce_json_is_what_a_json_input_reads(kafka_broker: EmbeddedBroker, make_topic: Callable[..., str],
                                                 capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topic = make_topic("views", partitions=2)
    err = produce(capsys, tmp_path, "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--format", "json",
                  "--fields", "user,page")
    assert "sent 3 updates in" in err and "json messages" in err
    updates, progress, messages = read_back(kafka_broker.bootstrap, topic, 2, "json")
    assert sorted(updates) == sorted(SENT) and progress == [13, 13]
    rows = [json.loads(m.value()) for m in messages if b"progress" not in m.value()]
    assert {"user", "page", "time", "diff"} == set(rows[0])


def test_produce_takes_the_configured_inputs_format_and_partitioner(kafka_broker: EmbeddedBroker,
                                                                   make_topic: Callable[..., str],
                                                                   tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic("views", partitions=3)
    path = config(tmp_path, kafka_broker.bootstrap, topic, "json", 'partitioner = "murmur2"')
    produce(capsys, tmp_path, "--config", str(path), "--input", "views")
    updates, _, messages = read_back(kafka_broker.bootstrap, topic, 3, "json")
    assert sorted(updates) == sorted(SENT)
    keyed = [m for m in messages if m.key() is not None]
    assert len(keyed) == 3 and all(m.partition() == kafka_partition(m.key(), 3) for m in keyed)
    assert json.loads(keyed[0].key()) in ({"user": 7}, {"user": 8})


def test_produce_debezium_events_for_a_debezium_input(kafka_broker: EmbeddedBroker, make_topic: Callable[..., str],
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic("views")
    path = config(tmp_path, kafka_broker.bootstrap, topic, "debezium", 'progress = "monotonic"')
    err = produce(capsys, tmp_path, "--config", str(path), "--input", "views")
    assert "4 debezium messages" in err and "progress" not in err  # +2 is two events
    updates, progress, messages = read_back(kafka_broker.bootstrap, topic, 1, "debezium")
    assert sorted(updates) == sorted([((7, "/home"), 10, 1), ((8, "/cart"), 11, 1), ((8, "/cart"), 11, 1),
                                      ((7, "/home"), 12, -1)])
    assert progress == [] and [json.loads(m.value())["op"] for m in messages] == ["c", "c", "c", "d"]


def test_produce_refuses_debezium_without_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "produce", "--topic", "t", "--bootstrap", "127.0.0.1:1", "--format", "debezium")
    assert code == 2 and "--fields" in err


def test_tail_prints_dead_letters(kafka_broker: EmbeddedBroker, make_topic: Callable[..., str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic("dead")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    writer = DeadLetterWriter(topic, lambda t, k, v, h: producer.produce(t, v, k, headers=h))
    writer.write(input="views", topic="views", partition=0, offset=41, raw=b'{"user": 7}',
                 errors=[Malformed("missing_field", "the row has no field 'page'")])
    writer.write(input="views", topic="views", partition=1, offset=3, raw=b"\xc1",
                 errors=[Malformed("bad_msgpack", "not msgpack")])
    connect = {"__connect.errors.topic": b"orders", "__connect.errors.partition": b"2",  # as Kafka Connect writes
               "__connect.errors.offset": b"9", "__connect.errors.connector.name": b"jdbc-sink",
               "__connect.errors.exception.class.name": b"org.apache.kafka.connect.errors.DataException",
               "__connect.errors.exception.message": b"Converting byte[] to Kafka Connect data failed"}
    producer.produce(topic, b"\xc1garbage", b"k", headers=list(connect.items()))
    assert producer.flush(10) == 0
    code, out, err = run(capsys, "tail", "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--dead-letters",
                         "--json", "--limit", "3")
    assert code == 0, err
    letters = [json.loads(line) for line in out.splitlines()]
    assert [(d["topic"], d["partition"], d["offset"]) for d in letters] == [
        ("views", 0, 41), ("views", 1, 3), ("orders", 2, 9)]
    assert (letters[2]["input"], letters[2]["raw"], letters[2]["key"]) == ("jdbc-sink", b"\xc1garbage".hex(), "k")
    assert letters[2]["counts"] == {"org.apache.kafka.connect.errors.DataException": 1}
    assert "missing_field" in json.dumps(letters[0]) and letters[0]["raw"] == '{"user": 7}'
    code, out, _ = run(capsys, "tail", "--topic", topic, "--bootstrap", kafka_broker.bootstrap, "--dead-letters",
                       "--limit", "1")
    assert code == 0 and "dead letter from views[0] offset 41" in out and "missing_field" in out
