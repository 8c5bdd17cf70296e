"""An input partition whose messages are not delivered is said: on the real broker, a
``read_committed`` consumer stops at the first record of a transaction still open, and sees the
partition at its end meanwhile. The worker names the partition, its next offset and the broker's
high watermark once, and says when its messages come again (the transaction aborted)."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Producer

from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.output.sink import OutputSpec

pytestmark = pytest.mark.kafka


def step_until(worker, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: unread {worker.stalls.unread}"
        worker.step()


def test_messages_behind_an_open_transaction_are_said_until_they_come(kafka_options, make_topic, caplog):
    source, results, dead = make_topic("in"), make_topic("out"), make_topic("dead")
    held = Producer({"bootstrap.servers": kafka_options["bootstrap.servers"],
                     "transactional.id": f"held-{uuid.uuid4().hex[:8]}"})
    held.init_transactions(30)
    held.begin_transaction()
    held.produce(source, b"not an update", partition=0)  # open: read_committed readers stop here
    assert held.flush(30) == 0
    with UpdateProducer(source, kafka_options) as producer:
        producer.send(("a", 1), 5, 1)
        producer.advance_to(100)
    worker = kafka_worker(lambda df, inputs: {"out": inputs["in"]}, [InputSpec("in", source, fields=["k", "v"])],
                          [OutputSpec("out", results)], kafka_options, group_id=f"g-{source}",
                          epochs=EpochPolicy(resolution_ns=10), dead_letter_topic=dead)
    worker.stalls.after = 0.5
    with worker, caplog.at_level(logging.INFO, logger="ddflow.daemon.worker"):
        step_until(worker, lambda: worker.stalls.unread)
        assert list(worker.stalls.unread) == [("in", 0)]
        reason = worker.stalls.unread[("in", 0)]
        assert reason.startswith(f"input 'in' {source}[0]: the broker's high watermark is 3, past the next offset 0")
        assert "transaction still open" in reason
        for _ in range(20):
            worker.step()
        said = [r for r in caplog.records if "nothing was delivered" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING  # once, however many steps
        held.abort_transaction(30)
        step_until(worker, lambda: not worker.stalls.unread)
        assert any("its messages come again" in r.getMessage() for r in caplog.records)
        step_until(worker, lambda: worker.frontier >= 100)
