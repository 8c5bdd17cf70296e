"""A record that makes a user function raise, under the dataflow's dead_letter policy: it goes to
the dead-letter topic with the exception and the operator, the operator treats it as absent at
every time (its retraction and re-insertion included), the rest of the output stays exact, and a
restart that replays it does not write its dead letter again: the dead letter is committed with the
epoch that holds the record's time, which the restart finds final on the result topic."""

from __future__ import annotations

import json

from ddflow.daemon.deadletter import decode_dead_letter
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.output.sink import OutputSpec
from ddflow.operators.nodes.calls import Quarantine
from support.broker import read_topic
from support.daemons import view_at


def parse(row):
    return (row[0], int(row[1]))  # raises on a value that is not a number


def flow(df, inputs):
    df.context.quarantine = Quarantine("dead_letter")
    return {"parsed": inputs["a"].map(parse)}


def test_a_poisoned_record_is_dead_lettered_and_absent_across_a_restart(kafka_options, make_topic):
    inp, out, dlq = make_topic("a"), make_topic("parsed"), make_topic("dlq")

    def worker():
        return kafka_worker(flow, [InputSpec("a", inp, fields=["k", "v"])], [OutputSpec("parsed", out)],
                            kafka_options, group_id=f"g-{inp}", dead_letter_topic=dlq,
                            epochs=EpochPolicy(resolution_ns=10))

    with UpdateProducer(inp, kafka_options) as p:
        p.insert(("k", "1"), 5)
        p.insert(("k", "x"), 10)  # poisoned
        p.advance_to(20)
        p.remove(("k", "x"), 25)  # its retraction: absent too, so nothing to retract
        p.insert(("k", "2"), 30)
        p.insert(("k", "x"), 35)
        p.insert(("k", "x"), 36)
        p.advance_to(50)
    worker().run(until=50, timeout=60)
    assert view_at(out, kafka_options, 50) == {("k", 1): 1, ("k", 2): 1}
    letters = [m for m in read_topic(kafka_options["bootstrap.servers"], dlq, 1)]
    assert len(letters) == 1  # once per function and record, however often it recurs
    letter = decode_dead_letter(letters[0].value(), letters[0].headers(), letters[0].key())
    assert letter.reason == "user_function" and json.loads(letter.raw) == ["k", "x"]  # the record, as JSON
    headers = {n: v.decode() for n, v in letters[0].headers()}
    assert headers["ddflow.value.format"] == "json" and headers["ddflow.time"] == "10"
    assert headers["__connect.errors.stage"] == "TRANSFORMATION" and headers["ddflow.operator"] == "map"
    assert headers["__connect.errors.exception.class.name"] == "builtins.ValueError"
    assert "ValueError: invalid literal for int()" in headers["__connect.errors.exception.stacktrace"]
    assert letter.input == "map parse" and (letter.topic, letter.partition, letter.offset) == ("", -1, -1)
    assert "map function parse (" in letter.detail and "raised ValueError: invalid literal for int()" in letter.detail
    assert "at time 10" in letter.detail

    with UpdateProducer(inp, kafka_options) as p:  # a restart replays the input from the beginning
        p.insert(("k", "3"), 60)
        p.remove(("k", "x"), 61)
        p.advance_to(80)
    again = worker()
    again.run(until=80, timeout=60)
    assert view_at(out, kafka_options, 80) == {("k", 1): 1, ("k", 2): 1, ("k", 3): 1}
    again_letters = read_topic(kafka_options["bootstrap.servers"], dlq, 1)
    assert [m.key() for m in again_letters] == [letters[0].key()]  # the replay wrote it no second time
    assert again.sink.dead_letters.replayed == 1


def test_a_poisoned_record_fed_ahead_of_an_epoch_is_dead_lettered_with_its_own_epoch(kafka_options, make_topic):
    """The record at time 35 comes before the marker at 20, so the epoch [.., 20) runs the function on
    it; its dead letter waits for the epoch holding 35. A worker stopped at 20 has written none (the
    record is replayed), and its restart writes it once, in the epoch that publishes time 35."""
    inp, out, dlq = make_topic("a"), make_topic("parsed"), make_topic("dlq")

    def worker():
        return kafka_worker(flow, [InputSpec("a", inp, fields=["k", "v"])], [OutputSpec("parsed", out)],
                            kafka_options, group_id=f"g-{inp}", dead_letter_topic=dlq,
                            epochs=EpochPolicy(resolution_ns=10))

    with UpdateProducer(inp, kafka_options) as p:
        p.insert(("k", "1"), 5)
        p.insert(("k", "x"), 35)  # poisoned, ahead of the frontier
        p.advance_to(20)
    first = worker()
    first.run(until=20, timeout=60)
    assert view_at(out, kafka_options, 20) == {("k", 1): 1}
    assert read_topic(kafka_options["bootstrap.servers"], dlq, 1) == []  # its epoch is not published yet
    assert first.frontier == 20 and len(first._failures_ahead) == 1  # the function did run on it

    with UpdateProducer(inp, kafka_options) as p:
        p.insert(("k", "2"), 40)
        p.advance_to(50)
    again = worker()
    again.run(until=50, timeout=60)
    assert view_at(out, kafka_options, 50) == {("k", 1): 1, ("k", 2): 1}
    letters = read_topic(kafka_options["bootstrap.servers"], dlq, 1)
    assert len(letters) == 1
    assert dict((n, v.decode()) for n, v in letters[0].headers())["ddflow.time"] == "35"


def test_the_policy_is_configured_per_dataflow_and_function(tmp_path):
    import pytest

    from ddflow.config import ConfigError, parse_config

    base = """
[dataflow]
function = "ddflow.config.dataflows:reachability"
{extra}
[kafka]
bootstrap = "127.0.0.1:9"
[[inputs]]
name = "edges"
topic = "edges"
fields = ["src", "dst"]
[[outputs]]
name = "reachable"
topic = "reachable"
"""
    config = parse_config(base.format(extra='on_error = "dead_letter"\non_error_functions = { "parse" = "stop" }'),
                          tmp_path / "d.toml")
    assert (config.dataflow.on_error, dict(config.dataflow.on_error_functions)) == ("dead_letter", {"parse": "stop"})
    assert parse_config(base.format(extra=""), tmp_path / "d.toml").dataflow.on_error == "stop"
    with pytest.raises(ConfigError, match=r"dataflow\.on_error.*'skip' is not one of 'stop', 'dead_letter'"):
        parse_config(base.format(extra='on_error = "skip"'), tmp_path / "d.toml")
    with pytest.raises(ConfigError, match=r"dataflow\.on_error_functions\.parse.*'drop' is not one of"):
        parse_config(base.format(extra='on_error_functions = { "parse" = "drop" }'), tmp_path / "d.toml")
