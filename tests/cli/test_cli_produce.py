"""``ddflow produce`` on the real broker: what lands on the topic is what the wire format says."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
from support.broker import read_topic
from support.daemons import DDFLOW
from test_cli_basics import ddflow  # type: ignore[import-not-found]

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.msgpack import decode_input

pytestmark = pytest.mark.kafka

FMT = InputFormat({"src": "int", "dst": "int"})


def decoded(bootstrap: str, topic: str, partitions: int) -> tuple[list[tuple[object, int, int]], dict[int, list[int]]]:
    updates, progress = [], {}
    for msg in read_topic(bootstrap, topic, partitions):
        d = decode_input(msg.value(), FMT)
        assert not d.malformed, d.malformed
        updates.extend(d.updates)
        if d.progress is not None:
            progress.setdefault(msg.partition(), []).append(d.progress)
    return updates, progress


def test_produce_json_lines_with_batches_and_progress(kafka_broker: EmbeddedBroker,
                                                      make_topic: Callable[..., str]) -> None:
    topic = make_topic("edges", partitions=2)
    lines = "\n".join([
        "[[1, 2], 10, 1]",
        "[[2, 3], 11, 1]",
        '{"progress": 12}',
        "[[[3, 4], 12, 1], [[1, 2], 13, -1]]",
        "",
    ])
    result = subprocess.run(
        [DDFLOW, "produce", "--topic", topic, "--bootstrap", kafka_broker.bootstrap],
        input=lines, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "sent 4 updates" in result.stderr and "progress 14" in result.stderr
    updates, progress = decoded(kafka_broker.bootstrap, topic, 2)
    assert sorted(updates) == sorted([((1, 2), 10, 1), ((2, 3), 11, 1), ((3, 4), 12, 1), ((1, 2), 13, -1)])
    assert progress == {0: [12, 14], 1: [12, 14]}  # markers on every partition, the last one past time 13


def test_produce_msgpack_file_with_explicit_progress(kafka_broker: EmbeddedBroker, make_topic: Callable[..., str],
                                                     tmp_path: Path) -> None:
    topic = make_topic("edges")
    path = tmp_path / "updates.msgpack"
    path.write_bytes(b"".join(msgpack.packb(u) for u in [[[5, 6], 100, 2], [[6, 7], 101, -1]]))
    result = ddflow("produce", "--topic", topic, "--format", "msgpack", "--progress", "500", str(path),
                    env={"KAFKA_BOOTSTRAP": kafka_broker.bootstrap})
    assert result.returncode == 0, result.stderr
    updates, progress = decoded(kafka_broker.bootstrap, topic, 1)
    assert updates == [((5, 6), 100, 2), ((6, 7), 101, -1)]
    assert progress == {0: [500]}


@pytest.mark.parametrize(("text", "message"), [
    ("[[1, 2], 10, 1]\nnot json\n", "stdin line 2: not JSON"),
    ("[[1, 2], 10, 0]\n", "stdin line 1: producing to"),  # zero diff
    ("[[1, 2], 1.5, 1]\n", "stdin line 1: producing to"),  # float time
    ("[[1, 2], 10]\n", "stdin line 1: expected [data, time_ns, diff]"),
])
def test_produce_names_the_bad_line(kafka_broker: EmbeddedBroker, make_topic: Callable[..., str],
                                    text: str, message: str) -> None:
    topic = make_topic("edges")
    result = subprocess.run(
        [DDFLOW, "produce", "--topic", topic, "--bootstrap", kafka_broker.bootstrap],
        input=text, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr

