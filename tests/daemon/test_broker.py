"""The embedded tansu broker: starts, answers, stops; KAFKA_BOOTSTRAP selects another broker."""

from __future__ import annotations

import os
import socket

import pytest
from confluent_kafka.admin import AdminClient

from ddflow.daemon.kafka.broker import EmbeddedBroker, tansu_binary
from ddflow.daemon.exceptions import BrokerError

pytestmark = pytest.mark.kafka


def test_embedded_broker_starts_answers_and_stops():
    broker = EmbeddedBroker(use_environment=False)
    with broker:
        assert broker.bootstrap.startswith("127.0.0.1:") and not broker.external
        pid = broker.pid
        meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
        assert meta.brokers
    assert broker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert tansu_binary().name == "tansu"


def test_kafka_bootstrap_environment_uses_that_broker(kafka_broker):
    broker = EmbeddedBroker(env={"KAFKA_BOOTSTRAP": kafka_broker.bootstrap})
    with broker:
        assert broker.external and broker.pid is None and broker.bootstrap == kafka_broker.bootstrap


def test_unreachable_kafka_bootstrap_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BrokerError, match=f"127.0.0.1:{port}.*no answer"):
        EmbeddedBroker(env={"KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"}, startup_timeout=1.0).start()
