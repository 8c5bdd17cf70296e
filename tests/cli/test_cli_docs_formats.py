"""docs/formats.md's Connect section runs as written: its config block loads, and its shell
commands (``ddflow produce`` in the configured inputs' formats, ``ddflow tail --dead-letters``)
run against the real broker with the example config's topic names and broker swapped in."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.docs import example
from support.broker import create_topic, read_topic  # type: ignore[import-not-found]
from support.daemons import DDFLOW

from ddflow.config import load_config
from ddflow.daemon.deadletter import DeadLetterWriter
from ddflow.daemon.formats import decoder
from ddflow.daemon.formats.schema import InputFormat
from ddflow.daemon.formats.types import Malformed
from ddflow.daemon.kafka.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "config/examples/page-titles.toml"


def test_connect_outputs_block_loads(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(textwrap.dedent("""
        [dataflow]
        function = "ddflow.config.dataflows:views_by_title"
        [[inputs]]
        name = "views"
        topic = "page-views"
        fields = { user = "int", page = "str" }
        """) + example("connect-outputs", "toml"), encoding="utf-8")
    outputs = {o.name: o for o in load_config(path).outputs}
    assert (outputs["views_per_page"].mode, outputs["views_per_page"].partitioner) == ("upsert", "murmur2")
    assert outputs["views_per_title"].tombstones and outputs["views_per_title"].schemas


@pytest.mark.kafka
def test_produce_and_tail_commands_run_as_written(kafka_broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    suffix = uuid.uuid4().hex[:6]
    names = {t: f"{t}-{suffix}" for t in ("page-views", "cms.public.pages", "ddflow-dead-letters")}
    text = (ROOT / EXAMPLE).read_text(encoding="utf-8").replace("127.0.0.1:9092", bootstrap)
    for old, new in names.items():
        text = text.replace(f'"{old}"', f'"{new}"')
        create_topic(bootstrap, new)
    config = tmp_path / "page-titles.toml"
    config.write_text(text, encoding="utf-8")
    producer = Producer({"bootstrap.servers": bootstrap})  # one dead letter for tail to print
    DeadLetterWriter(names["ddflow-dead-letters"], lambda t, k, v, h: producer.produce(t, v, k, headers=h)).write(
        input="views", topic=names["page-views"], partition=0, offset=7, raw=b"[1, 2]",
        errors=[Malformed("shape", "expected an update")])
    assert producer.flush(10) == 0

    script = example("produce-formats", "bash").replace(EXAMPLE, str(config))
    env = {**os.environ, "PATH": f"{Path(DDFLOW).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dead letter from" in done.stdout and "shape" in done.stdout

    views = decoder("json", InputFormat({"user": "int", "page": "str"}))
    got = [views.decode(m.value()) for m in read_topic(bootstrap, names["page-views"], 1)]
    assert [u for d in got for u in d.updates] == [((1, "home"), 1_700_000_000_001_000_000, 1)]
    assert {d.progress for d in got if d.progress is not None} == {1_700_000_000_010_000_000}
    pages = decoder("debezium", InputFormat({"page": "str", "title": "str"}))
    events = read_topic(bootstrap, names["cms.public.pages"], 1)
    assert json.loads(events[0].value())["op"] == "c"
    assert pages.decode(events[0].value()).updates == [(("home", "Home"), 1_700_000_000_000_000_000, 1)]
