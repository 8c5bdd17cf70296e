"""Outputs the Kafka ecosystem reads as its own, on the real broker, read back with plain
confluent-kafka consumers at ``isolation.level=read_committed`` (what a sink must set: ddflow
writes each commit window in a transaction):

* debezium outputs accepted by a consumer written from Debezium's documented format
  (`debezium_consumer`): complete source block, snapshot reads for the first epoch, a tombstone
  after each delete, Avro schema names, the epoch's transaction block;
* json outputs in ``mode = "upsert"``: a table of rows by key, tombstones when rows leave;
* ``partitioner = "murmur2"``: each message on the partition confluent-kafka's own murmur2
  partitioner gives its key.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from debezium_consumer import Table

from ddflow.daemon.exceptions import WireError
from ddflow.daemon.formats import encoder
from ddflow.daemon.formats.partitioners import kafka_partition, murmur2
from ddflow.daemon.output.sink import KafkaSink, OutputSpec
from ddflow.operators.lattice import T_MIN

pytestmark = pytest.mark.kafka

FIELDS = {"page": "str", "views": "int"}


def read_committed(kafka_options: dict[str, Any], topic: str, partitions: int) -> list[Any]:
    """Every committed message of ``topic``, as a sink reads them (read_committed)."""
    consumer = Consumer({**kafka_options, "group.id": f"sink-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    out = []
    try:
        for _ in range(400):
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                out.append(msg)
            if len(at_end) == partitions:
                return out
        raise TimeoutError(f"{topic} not read to its end")
    finally:
        consumer.close()


def table_epochs(seed: int, keys: int = 12, epochs: int = 6) -> tuple[list[tuple[int, int, list]], dict[str, int]]:
    """Epochs of a one-row-per-key output (a count per page): the first inserts rows at 9 (the
    snapshot epoch ``[T_MIN, 10)`` of a start from a backfill), the others change, delete and
    re-insert them."""
    rng = random.Random(seed)
    rows = {f"/p{k}": rng.randrange(1, 100) for k in rng.sample(range(keys), keys // 2)}
    out, lower = [(T_MIN, 10, [((page, views), 9, 1) for page, views in rows.items()])], 10
    for e in range(1, epochs):
        upper = 10 * (e + 1)
        updates = []
        for t in sorted(rng.sample(range(max(lower, 0), upper), 5)):
            page = f"/p{rng.randrange(keys)}"
            if page in rows:
                updates.append(((page, rows[page]), t, -1))
                if rng.random() < 0.3:
                    del rows[page]
                    continue
            rows[page] = rng.randrange(1, 100)
            updates.append(((page, rows[page]), t, 1))
        out.append((lower, upper, updates))
        lower = upper
    return out, rows


def publish(kafka_options: dict[str, Any], spec: OutputSpec, epochs: list[tuple[int, int, list]]) -> None:
    sink = KafkaSink([spec], kafka_options, transactional_id=f"tx-{spec.topic}")
    sink.open()
    assert sink.transactional
    for lower, upper, updates in epochs:  # the first: the contents of the snapshot a worker started from
        sink.publish(lower, upper, {spec.name: updates}, snapshot=lower == T_MIN)
    sink.close()


@pytest.mark.parametrize("schemas", [False, True])
def test_debezium_output_is_accepted_by_a_debezium_consumer(kafka_options, make_topic, schemas):
    topic, progress = make_topic("page-counts", partitions=3), make_topic("progress", partitions=1)
    epochs, final = table_epochs(7)
    spec = OutputSpec("page_counts", topic, format="debezium", fields=FIELDS, progress_topic=progress,
                      schemas=schemas, source={"name": "shop", "db": "flows:count_pages"})
    publish(kafka_options, spec, epochs)
    table = Table()
    messages = read_committed(kafka_options, topic, 3)
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        table.apply(msg.key(), msg.value())
    assert table.rows == {json.dumps({"page": p}): {"page": p, "views": v} for p, v in final.items()}
    deletes = table.ops.count("d")
    assert deletes > 0 and table.ops.count("tombstone") == deletes
    assert table.ops.count("r") == len(epochs[0][2]) and "c" in table.ops and "u" in table.ops
    for orders in table.transactions.values():  # per id and partition, 1, 2, 3, ...
        assert sorted(orders) == sorted(n for part in _runs(orders) for n in part)
    first = next(json.loads(m.value()) for m in messages if m.value() is not None)
    source = (first["payload"] if schemas else first)["source"]
    assert (source["connector"], source["name"], source["db"], source["table"]) == \
        ("ddflow", "shop", "flows:count_pages", "page_counts")


def _runs(orders: list[int]) -> list[list[int]]:
    """``orders`` cut into its increasing runs 1, 2, ..., n (one per partition)."""
    runs: list[list[int]] = []
    for n in orders:
        if n == 1:
            runs.append([])
        assert runs and n == len(runs[-1]) + 1, orders
        runs[-1].append(n)
    return runs


def test_debezium_tombstones_can_be_turned_off():
    enc = encoder("debezium", "counts", "t", fields=FIELDS, progress_topic="tp", tombstones=False)
    data, marker = enc.epoch(0, 10, "inc", 0, [(("a", 1), 5, -1), (("b", 1), 5, -1)])
    assert len(data) == 2 and all(m[3] is not None for m in data) and b'"count":2' in marker[3]


def test_upsert_output_is_a_table(kafka_options, make_topic):
    topic, progress = make_topic("page-views", partitions=2), make_topic("progress", partitions=1)
    epochs, final = table_epochs(3)
    spec = OutputSpec("views", topic, format="json", fields=FIELDS, progress_topic=progress, mode="upsert")
    publish(kafka_options, spec, epochs)
    rows: dict[str, Any] = {}
    tombstones = 0
    for msg in sorted(read_committed(kafka_options, topic, 2), key=lambda m: (m.partition(), m.offset())):
        key = json.loads(msg.key())
        assert list(key) == ["page"]
        if msg.value() is None:
            tombstones += 1
            rows.pop(key["page"], None)
        else:
            row = json.loads(msg.value())
            assert list(row) == ["page", "views"] and row["page"] == key["page"]  # the row, no time or diff
            rows[key["page"]] = row["views"]
    assert rows == final and tombstones > 0


def test_upsert_refuses_an_output_with_two_rows_for_a_key():
    enc = encoder("json", "views", "t", fields=FIELDS, progress_topic="tp", mode="upsert")
    data, _ = enc.epoch(0, 10, "inc", 0, [(("a", 1), 3, 1), (("a", 1), 4, -1), (("a", 2), 5, 1)])
    assert [(m[2], m[3]) for m in data] == [(b'{"page":"a"}', b'{"page":"a","views":2}')]
    with pytest.raises(WireError, match="at most one record per key"):
        enc.epoch(0, 10, "inc", 0, [(("a", 1), 3, 1), (("a", 2), 5, 1)])


def test_murmur2_places_keys_as_confluent_kafka_does(kafka_options, make_topic):
    """Keys produced by confluent-kafka with its murmur2 partitioners land where `kafka_partition`
    says, and a ``partitioner = "murmur2"`` output puts every message there too."""
    partitions = 5
    topic = make_topic("keys", partitions=partitions)
    keys = [json.dumps({"page": f"/p{i}"}, separators=(",", ":")).encode() for i in range(40)]
    keys += [bytes(range(n)) for n in range(9)] + ["naïve ✓".encode()]
    for partitioner in ("murmur2", "murmur2_random"):
        delivered: dict[bytes, int] = {}
        producer = Producer({**kafka_options, "partitioner": partitioner})
        for key in keys:
            producer.produce(topic, b"v", key=key,
                             on_delivery=lambda err, msg: delivered.__setitem__(msg.key(), msg.partition()))
        assert producer.flush(20) == 0
        assert delivered == {key: kafka_partition(key, partitions) for key in keys}, partitioner
    assert murmur2(b"21") == -973932308 and murmur2(b"foobar") == -790332482  # Kafka's own test vectors

    out, progress = make_topic("out", partitions=partitions), make_topic("progress", partitions=1)
    spec = OutputSpec("views", out, format="json", fields=FIELDS, progress_topic=progress, partitioner="murmur2")
    updates = [((f"/p{i}", i), i, 1) for i in range(40)]
    publish(kafka_options, spec, [(T_MIN, 100, updates)])
    messages = read_committed(kafka_options, out, partitions)
    assert len(messages) == 40
    assert all(m.partition() == kafka_partition(m.key(), partitions) for m in messages)
    assert len({m.partition() for m in messages}) == partitions
