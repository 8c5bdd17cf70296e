"""Broker fixtures for tests that need a real Kafka-protocol broker.

One tansu broker per test session (`ddflow.daemon.kafka.broker.EmbeddedBroker`; `KAFKA_BOOTSTRAP`
selects an existing broker instead). Tests create fresh topics with `make_topic` so they never
see each other's messages, read with `assign()` and use `fetch.wait.max.ms` = ``FETCH_WAIT_MS``.

The root conftest loads this module as a plugin, so every test may ask for the fixtures
``kafka_broker``, ``kafka_options`` and ``make_topic``; the helpers are imported by name
(``from support.broker import read_topic``).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ddflow.daemon.kafka.broker import EmbeddedBroker

_counter = itertools.count()

# how long the broker may hold the fetch of a test's client (or daemon) with nothing new to return
FETCH_WAIT_MS = 100

BROKER_FIXTURES = frozenset({"kafka_broker", "kafka_options", "make_topic", "kcat_broker"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a broker fixture (directly or through another fixture) is marked
    ``kafka``, so ``-m "not kafka"`` leaves out exactly the tests that start a broker."""
    for item in items:
        if BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def kafka_options(kafka_broker: EmbeddedBroker) -> dict[str, Any]:
    """Client options for the session broker, tuned for fast tests."""
    return {"bootstrap.servers": kafka_broker.bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10).values():
        future.result(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until metadata shows every partition
        meta = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return name
        time.sleep(0.05)
    raise RuntimeError(f"topic {name} did not appear with {partitions} partitions")


@pytest.fixture
def make_topic(kafka_broker: EmbeddedBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``make_topic(label="t", partitions=1)`` creates a topic with a name no other test uses."""
    test = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]

    def make(label: str = "t", partitions: int = 1) -> str:
        name = f"{test}-{label}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        return create_topic(kafka_broker.bootstrap, name, partitions)

    return make


def read_topic(bootstrap: str, topic: str, partitions: int, *, timeout: float = 20.0) -> list[Any]:
    """Every message of a topic (all partitions, from the beginning, until each is at its end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            "auto.offset.reset": "earliest",
        }
    )
    # offset 0 rather than OFFSET_BEGINNING: librdkafka waits ~0.5 s to resolve a logical offset
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: partitions not at end after {timeout} s")
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise RuntimeError(str(msg.error()))
                at_end.discard(msg.partition())
                out.append(msg)
    finally:
        consumer.close()
    return out
