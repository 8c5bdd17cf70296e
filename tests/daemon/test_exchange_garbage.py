"""Whatever crosses between workers over the exchange topics is checked: garbage on an exchange or
agree topic (bytes that are not msgpack, a map of this run missing a field, such as a marker without
``seq``) is refused with its source named (topic, partition, offset, the receiving worker) and
skipped, never filed and never a crash loop. Unit checks of `decode_message`, then two ``ddflow run``
workers over the real broker given garbage between two rounds: the output stays exact."""

from __future__ import annotations

import re
import urllib.request

import msgpack
import numpy as np
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from test_workers_daemon import MS, T0, Daemons, config, oracle, stream  # type: ignore[import-not-found]

from ddflow.daemon.cluster.transport_wire import (ExchangeMessageError, Refusals, batch_messages, decode_message,
                                                  marker_message)
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient
from ddflow.operators.transport import ExchangeBatch, ExchangeMarker

RUN = "run-1"


def packed(m: dict) -> bytes:
    return msgpack.packb({"run": RUN, "gen": None, **m}, use_bin_type=True)


def good_batch() -> dict:
    batch = ExchangeBatch(0, 3, 1, 0, 0, 10, (), np.array([[1, 2], [3, 4]], dtype=np.int64),
                          np.array([[1], [2]], dtype=np.int64), np.array([1, -1], dtype=np.int64))
    [m] = batch_messages(batch, incarnation="abc", max_batch=100)
    return m


def good_marker() -> dict:
    return marker_message(ExchangeMarker(0, 3, 1, 0, 0, 10, (), 2), incarnation="abc")


def test_what_workers_write_is_accepted_and_other_runs_skipped() -> None:
    for m in (good_batch(), good_marker(), {"kind": "vote", "seq": 0, "source": 1, "value": [True, 5]},
              {"kind": "hello"}, {"kind": "generation", "generation": "g1", "start": 4}):
        decoded = decode_message(packed(m), run=RUN, workers=2)
        assert decoded is not None and decoded["kind"] == m["kind"]
    assert decode_message(msgpack.packb({"run": "other", "kind": "garbage"}), run=RUN, workers=2) is None


@pytest.mark.parametrize(("value", "why"), [
    (b"\xc1 not msgpack", "it is not msgpack"),
    (b"", "it is not msgpack"),
    (None, "it has no value"),
    (msgpack.packb([1, 2, 3]), "a msgpack list, not a map"),
    (packed({"kind": "gossip"}), "unknown kind 'gossip'"),
    (packed({k: v for k, v in good_marker().items() if k != "seq"}), "a marker message has no 'seq'"),
    (packed({**good_marker(), "seq": "3"}), "'seq' = '3', not an int"),
    (packed({**good_marker(), "source": 2}), "'source' = 2 outside [0, 2)"),
    (packed({**good_marker(), "count": -1}), "'count' = -1 outside"),
    (packed({**good_marker(), "seq": True}), "not an int"),
    (packed({**good_marker(), "rounds": ["x"]}), "not a list of ints"),
    (packed({**good_marker(), "inc": None}), "incarnation"),
    (packed({**good_batch(), "times": b"\0" * 8}), "'times' that are not 2 x 1 int64 bytes"),
    (packed({**good_batch(), "diffs": b"\0" * 7}), "'diffs' that are not int64 bytes"),
    (packed({**good_batch(), "columns": b"\0" * 8}), "neither 'records' nor 'columns' of 2 x 2"),
    (packed({**good_batch(), "columns": None, "records": [1]}), "'records' that are not a list of 2"),
    (packed({"kind": "vote", "seq": 1, "source": 0}), "a vote message has no 'value'"),
    (packed({"kind": "generation", "generation": 7}), "'generation' = 7, not a str"),
])
def test_garbage_is_refused_saying_why(value: bytes | None, why: str) -> None:
    with pytest.raises(ExchangeMessageError, match=re.escape(why)):
        decode_message(value, run=RUN, workers=2)


def test_refusals_name_the_first_of_each_partition_then_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = Refusals(1, window=60, clock=lambda: now[0])
    error = ExchangeMessageError("it is not msgpack")
    with caplog.at_level("WARNING", logger="ddflow.daemon.cluster.transport"):
        for offset in range(5):
            refusals.refuse("x-exchange-0", 1, offset, error)
        refusals.refuse("x-agree", 0, 9, error)
        now[0] = 61.0
        refusals.refuse("x-exchange-0", 1, 5, error)
    lines = [r.getMessage() for r in caplog.records]
    assert refusals.count == 7 and len(lines) == 3
    assert lines[0].startswith("exchange: worker 1 refused the message at x-exchange-0[1] offset 0: it is not msgpack")
    assert "x-agree[0] offset 9" in lines[1]
    assert "x-exchange-0[1] offset 5" in lines[2] and "(4 more refused there since the last said)" in lines[2]


def test_garbage_on_the_exchange_topics_of_two_running_workers_is_refused_and_skipped(
        kafka_broker, make_topic, tmp_path) -> None:
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 10}
    source, results, dead = make_topic("in", 2), make_topic("out"), make_topic("dead")
    rounds = stream("count-per-page", rounds=2)
    want = oracle("count-per-page", rounds)
    daemons = Daemons(config(tmp_path, bootstrap, "count-per-page", 2, source, results, dead), 2)
    prefix, run = f"ddflow-{source}", source  # the exchange topics' prefix and run tag: from the group id
    try:
        with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
            for record, t, d in rounds[0]:
                producer.send(record, t, d)
            producer.advance_to(T0 + 10 * MS)
            producer.flush()
            assert client.wait_for(T0 + 10 * MS, timeout=120), daemons.log()
            assert client.view == want.at(T0 + 10 * MS - 1)

            garbage = Producer({"bootstrap.servers": bootstrap})
            marker = {"run": run, "gen": None, "kind": "marker", "inc": "x", "channel": 0, "source": 1, "dest": 0,
                      "lower": 0, "upper": 1, "rounds": [], "count": 0}  # no seq
            for partition in (0, 1):  # to each worker
                garbage.produce(f"{prefix}-exchange-0", b"\xc1 not msgpack", partition=partition)
                garbage.produce(f"{prefix}-exchange-0", msgpack.packb(marker), partition=partition)
            garbage.produce(f"{prefix}-agree", b"\x00\xffgarbage", partition=0)  # read by both
            assert garbage.flush(10) == 0
            del garbage

            for record, t, d in rounds[1]:
                producer.send(record, t, d)
            producer.advance_to(T0 + 20 * MS)
            producer.flush()
            assert client.wait_for(T0 + 20 * MS, timeout=120), daemons.log()
            assert client.view == want.at(T0 + 20 * MS - 1)
            for worker in (0, 1):  # counted where the operator looks: 2 on its exchange partition, 1 on agree
                url = re.search(r"metrics on (http://[\d.]+:\d+)/metrics", "".join(daemons.logs[worker])).group(1)
                with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
                    text = response.read().decode()
                [refused] = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                             if s.name == "ddflow_exchange_refused_messages_total"]
                assert refused == 3, (worker, text)
    finally:
        codes = daemons.stop()
    text = "\n".join("".join(lines) for lines in daemons.logs)
    assert codes == [0, 0], daemons.log()
    assert "Traceback" not in text and "KeyError" not in text, daemons.log()
    for worker in (0, 1):
        said = "".join(daemons.logs[worker])
        assert re.search(rf"worker {worker} refused the message at {re.escape(prefix)}-exchange-0\[{worker}\] offset "
                         r"\d+: it is not msgpack", said), said
        assert re.search(rf"worker {worker} refused the message at {re.escape(prefix)}-agree\[0\] offset \d+", said), said
