"""A stalled output frontier is explained: the partition holding it back, and why (no marker yet,
or markers that do not reach the next epoch boundary); said once, cleared when it moves."""

from __future__ import annotations

import logging

from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.testing import ListSink, ReplaySource
from ddflow.daemon.worker import Worker


def worker_over(source: ReplaySource, sink: ListSink, resolution_ns: int) -> Worker:
    worker = Worker(lambda df, i: {"out": i["a"]}, source, sink, epochs=EpochPolicy(resolution_ns=resolution_ns))
    worker.stalls.after = 0.0  # say a stall at the first step that finds one
    return worker


def test_a_partition_without_markers_is_named_until_it_sends_one(caplog):
    sink = ListSink(["out"])
    source = ReplaySource([InputSpec("a", "ta", fields=["k", "v"])], partitions=2, dead_letters=sink.dead_letters)
    source.send_updates("a", [((1, 2), 5, 1)], partition=0)
    source.send_updates("a", [((3, 4), 6, 1)], partition=1)
    source.advance_to("a", 100, partitions=[0])  # partition 1 never promises anything
    worker = worker_over(source, sink, 10)
    with worker, caplog.at_level(logging.INFO, logger="ddflow.daemon.worker"):
        for _ in range(5):
            worker.step()
        assert worker.stalls.reason == "input 'a' ta[1] holds it back: no progress marker read from it yet (next offset 1)"
        said = [r for r in caplog.records if "has not moved" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING  # once, however many steps
        assert "while 2 updates wait" in said[0].getMessage()
        source.advance_to("a", 100, partitions=[1])
        for _ in range(5):
            worker.step()
        assert worker.stalls.reason is None and sink.view("out") == {(1, 2): 1, (3, 4): 1}
        assert any("moves again" in r.getMessage() for r in caplog.records)


def test_markers_short_of_the_epoch_boundary_are_said():
    sink = ListSink(["out"])
    source = ReplaySource([InputSpec("a", "ta", fields=["k", "v"])], dead_letters=sink.dead_letters)
    source.send_updates("a", [((1, 2), 5, 1)])
    source.advance_to("a", 5_000)  # progress at 5,000 ns with 1 ms epochs: nothing can close
    worker = worker_over(source, sink, 1_000_000)
    with worker:
        for _ in range(5):
            worker.step()
        reason = worker.stalls.reason
    assert reason is not None and reason.startswith("input 'a' ta[0] holds it back at time 5000: ")
    assert reason.endswith("the next epoch closes when every partition's markers reach 1000000 "
                           "(epoch.resolution 1000000 ns)")


def test_no_stall_without_waiting_updates():
    sink = ListSink(["out"])
    source = ReplaySource([InputSpec("a", "ta", fields=["k", "v"])], partitions=2, dead_letters=sink.dead_letters)
    worker = worker_over(source, sink, 10)
    with worker:
        for _ in range(3):
            worker.step()
        assert worker.stalls.reason is None  # nothing waits: an idle input is not a stall


def test_readyz_names_the_stall(tmp_path):
    from ddflow.config import parse_config
    from ddflow.daemon.service import Service

    config = parse_config("""
[dataflow]
function = "ddflow.config.dataflows:reachability"
[kafka]
bootstrap = "127.0.0.1:9"
[[inputs]]
name = "edges"
topic = "edges"
fields = ["src", "dst"]
[[outputs]]
name = "reachable"
topic = "reachable"
""", tmp_path / "daemon.toml")
    service = Service(config)
    sink = ListSink(["out"])
    source = ReplaySource([InputSpec("a", "ta", fields=["k", "v"])], partitions=2, dead_letters=sink.dead_letters)
    source.send_updates("a", [((1, 2), 5, 1)], partition=0)
    worker = worker_over(source, sink, 10)
    with worker:
        for _ in range(3):
            worker.step()
        service.worker, service.stats.epochs = worker, 1
        service._running.set()
        assert service.ready() == (False, "output frontier stalled: input 'a' ta[0] holds it back: no progress "
                                          "marker read from it yet (next offset 1)")
