"""An unreachable broker is said in one line (address, error, for how long), and librdkafka's own
lines reach Python logging once per kind instead of flooding stderr."""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import Consumer

from ddflow.daemon.exceptions import KafkaClientError
from ddflow.daemon.kafka.client import client_config, topic_partitions
from ddflow.daemon.kafka.logs import LIBRDKAFKA_LOGGER, Deduplicate


@pytest.fixture
def closed_port() -> str:
    """An address where nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_metadata_from_an_unreachable_broker_says_so_in_one_line(closed_port):
    with pytest.raises(KafkaClientError) as info:
        topic_partitions({"bootstrap.servers": closed_port}, "edges", timeout=2.0)
    message = str(info.value)
    assert message.startswith(f"reading metadata of topic 'edges': the broker at {closed_port} is unreachable: ")
    assert "(no answer within " in message and "is kafka.bootstrap right?" in message and "\n" not in message


def test_librdkafka_lines_go_through_logging_once_per_kind(closed_port, caplog):
    dedup = next(f for f in LIBRDKAFKA_LOGGER.filters if isinstance(f, Deduplicate))
    dropped = dedup.dropped
    consumer = Consumer(client_config({"bootstrap.servers": closed_port, "reconnect.backoff.ms": 10,
                                       "reconnect.backoff.max.ms": 50},
                                      {"group.id": "unreachable"}, who="test consumer"))
    try:
        with caplog.at_level(logging.DEBUG, logger="ddflow.kafka.librdkafka"):
            for _ in range(30):  # ~3 s of reconnect attempts every 10-50 ms: dozens of identical lines
                consumer.poll(0.1)
                if dedup.dropped - dropped >= 5:
                    break
    finally:
        consumer.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "ddflow.kafka.librdkafka"]
    refused = [line for line in lines if "Connection refused" in line]
    assert len(refused) == 1 and closed_port in refused[0]  # said once, through logging
    assert dedup.dropped - dropped >= 5  # the repeats librdkafka made were dropped, not lost silently


def test_repeats_are_counted_in_the_next_line_after_the_window():
    now = [0.0]
    dedup = Deduplicate(window=60.0, clock=lambda: now[0])

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord("x", logging.ERROR, __file__, 1, "%s [%s] %s", ("FAIL", "rdkafka#consumer-1", text),
                                 None)

    assert dedup.filter(record("Connect to b:1 failed (after 0ms in state CONNECT)"))
    assert not dedup.filter(record("Connect to b:1 failed (after 3ms in state CONNECT)"))  # the same kind
    assert dedup.filter(record("Connect to b:2 failed (after 0ms in state CONNECT)"))  # another broker
    now[0] = 61.0
    later = record("Connect to b:1 failed (after 1ms in state CONNECT)")
    assert dedup.filter(later)
    assert later.getMessage().endswith("(and 1 more like it in the last 61 s)")
