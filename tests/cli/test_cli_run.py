"""``ddflow run`` as a subprocess on the real broker: results, every metric family, probes, SIGTERM.

The test sends a known edge stream (with a malformed message and a late update) to the daemon
running the reachability example, scrapes /metrics, /healthz and /readyz over HTTP, checks each
family against what it sent, then sends SIGTERM and checks the exit code and that the last
promised times are final on the result topic.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from support.broker import FETCH_WAIT_MS
from support.daemons import DDFLOW, MS, Daemon

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.cli.demo import reachable_pairs
from ddflow.daemon.observe.metrics import METRIC_NAMES
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka

T0 = 1_700_000_000_000_000_000  # data times: ns since the epoch


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(url: str) -> tuple[set[str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    text = http(url + "/metrics")[1]
    names, values = set(), {}
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        for s in family.samples:
            labels = dict(s.labels)
            if s.name.startswith("ddflow_"):
                assert labels.pop("worker") == "0", s  # one worker: worker 0
            values[(s.name, frozenset(labels.items()))] = s.value
    return names, values


def value(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return values[(name, frozenset(labels.items()))]


def write_config(tmp_path: Path, bootstrap: str, edges: str, results: str, dead: str) -> Path:
    path = tmp_path / "daemon.toml"
    path.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:reachability"
args = {{ roots = [0, 1] }}

[kafka]
bootstrap = "{bootstrap}"
group_id = "{edges}"

[kafka.options]
"fetch.wait.max.ms" = {FETCH_WAIT_MS}

[[inputs]]
name = "edges"
topic = "{edges}"
fields = {{ src = "int", dst = "int" }}
progress = "explicit"
late = "reject"

[[outputs]]
name = "reachable"
topic = "{results}"

[epoch]
resolution = "1ms"

[dead_letter]
topic = "{dead}"

[metrics]
address = "127.0.0.1:0"
""")
    return path


def test_run_serves_every_family_and_exits_0_on_sigterm_with_output_final(
        kafka_broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    edges, results, dead = make_topic("edges", 2), make_topic("reachable"), make_topic("dead")
    config = write_config(tmp_path, bootstrap, edges, results, dead)
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    daemon = Daemon(config)
    try:
        url = daemon.wait_for(r"metrics on (http://[\d.]+:\d+)/metrics").group(1)
        effective = daemon.wait_for(r"effective configuration: (.*)").group(1)
        assert edges in effective and '"late": "reject"' in effective
        assert http(url + "/healthz")[0] == 200

        # before anything is sent every family is there, known series at 0, and not ready
        names, values = scrape(url)
        assert {n for n in names if n.startswith("ddflow_")} == set(METRIC_NAMES)
        # the process's own metrics: memory, CPU, open files, and the garbage collector's work
        assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                "python_gc_objects_collected_total"} <= names
        assert values[("process_resident_memory_bytes", frozenset())] > 0
        assert value(values, "ddflow_input_updates_total", input="edges") == 0
        assert value(values, "ddflow_dead_letters_total", input="edges", reason="bad_msgpack") == 0

        # the worker reads its inputs before anything is sent: the update sent late below must reach
        # it after the epochs it is late for (read in one poll with them, it would not be late)
        daemon.wait_for(r"worker open")
        window = [(0, 1), (1, 2), (2, 3), (5, 6), (6, 0), (1, 2)]  # (1, 2) twice: a multiset
        with UpdateProducer(edges, options) as producer:
            for k, edge in enumerate(window):
                producer.insert(edge, T0 + k)
            producer.advance_to(T0 + 2 * MS)
            producer.remove((1, 2), T0 + 2 * MS + 5)  # the window slides: one copy of (1, 2) goes
            producer.insert((3, 4), T0 + 2 * MS + 5)
            producer.advance_to(T0 + 3 * MS)
        bad = Producer({"bootstrap.servers": bootstrap})
        bad.produce(edges, b"\xc1 not msgpack", partition=0)  # malformed
        late = UpdateProducer(edges, options)
        late.insert((9, 9), T0 + 10)  # behind the frontier: late, rejected
        late.flush()
        bad.flush(10)
        del bad, late  # no client may outlive the session broker

        final = [(0, 1), (1, 2), (2, 3), (5, 6), (6, 0), (3, 4)]
        with ResultClient(results, options) as client:
            assert client.wait_for(T0 + 3 * MS, timeout=120), daemon.log
            view = client.view
            published = client.stats.messages
        assert view == dict.fromkeys(reachable_pairs(final, range(2)), 1)

        # `ddflow tail` prints the same view at the frontier
        tail = subprocess.run([DDFLOW, "tail", "--topic", results, "--bootstrap", bootstrap, "--duration", "2",
                               "--json", "--limit", "100"], capture_output=True, text=True, timeout=120)
        assert tail.returncode == 0, tail.stderr
        first = json.loads(tail.stdout.splitlines()[0])
        assert first["frontier"] >= T0 + 3 * MS and first["records"] == len(view)
        assert {tuple(record): count for record, count in first["view"]} == view
        text = subprocess.run([DDFLOW, "tail", "--topic", results, "--duration", "1"], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "KAFKA_BOOTSTRAP": bootstrap})
        assert text.returncode == 0, text.stderr
        assert text.stdout.startswith(f"view at frontier {first['frontier']}: {len(view)} records")
        assert "  (0, 3)\n" in text.stdout

        deadline = time.monotonic() + 60
        while http(url + "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http(url + "/readyz") == (200, "ready\n")
        while time.monotonic() < deadline:  # the dead letters commit on the next epoch or within seconds
            names, values = scrape(url)
            if value(values, "ddflow_dead_letters_total", input="edges", reason="bad_msgpack") == 1 and \
                    value(values, "ddflow_late_updates_total", input="edges", policy="reject") == 1:
                break
            time.sleep(0.2)
        assert {n for n in names if n.startswith("ddflow_")} == set(METRIC_NAMES)
        sent = len(window) + 2
        assert value(values, "ddflow_input_updates_total", input="edges") == sent
        assert value(values, "ddflow_dead_letters_total", input="edges", reason="bad_msgpack") == 1
        assert value(values, "ddflow_late_updates_total", input="edges", policy="reject") == 1
        assert value(values, "ddflow_dead_letters_total", input="edges", reason="late") == 1
        assert value(values, "ddflow_epochs_total") >= 1
        assert value(values, "ddflow_epoch_processing_seconds_count") == value(values, "ddflow_epochs_total")
        assert value(values, "ddflow_end_to_end_latency_seconds_count") == sent
        assert value(values, "ddflow_input_frontier_timestamp_seconds", input="edges") >= (T0 + 3 * MS) / 1e9
        partitions = [value(values, "ddflow_input_partition_frontier_timestamp_seconds", input="edges",
                            partition=p) for p in "01"]  # none holds the input's frontier back any more
        assert 0 < min(partitions) and min(partitions) >= value(values, "ddflow_input_frontier_timestamp_seconds",
                                                                input="edges")
        assert value(values, "ddflow_output_frontier_timestamp_seconds", output="reachable") >= (T0 + 3 * MS) / 1e9
        assert value(values, "ddflow_last_epoch_timestamp_seconds") > time.time() - 600
        assert value(values, "ddflow_ready") == 1
        out = value(values, "ddflow_output_updates_total", output="reachable")
        assert out >= len(view) and published > 0
        arranged = [k for k in values if k[0] == "ddflow_arrangement_records"]
        assert arranged and all(values[k] >= 0 for k in arranged)
        assert sum(values[k] for k in arranged) > 0
        # labelled as the dataflow names them (reachability's Collection.name), its map by its function
        assert {dict(k[1])["arrangement"] for k in arranged} == {"edges.by_key", "reach.by_key", "candidates.by_self",
                                                                 "reached.output"}
        # the swap of the pairs leaving the loop builds them from their columns: its memo holds none
        assert value(values, "ddflow_operator_memo_records", operator="map(_swap)") == 0

        # more input, promised but not on an epoch boundary; SIGTERM must publish it and exit 0
        with UpdateProducer(edges, options) as producer:
            producer.insert((4, 7), T0 + 3 * MS + 10)
            producer.advance_to(T0 + 3 * MS + 11)
        time.sleep(1.0)
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0, daemon.log
        with ResultClient(results, options) as client:
            client.catch_up(timeout=30)
            assert (client.frontier or 0) >= T0 + 3 * MS + 11, daemon.log
            assert (0, 7) in client.view and (1, 7) in client.view
    finally:
        daemon.kill()


def test_run_takes_broker_and_address_from_env_and_never_logs_secrets(
        kafka_broker: EmbeddedBroker, tmp_path: Path) -> None:
    name = f"run-env-{time.time_ns()}"
    config = tmp_path / "daemon.toml"
    config.write_text(f"""
[dataflow]
function = "ddflow.config.dataflows:page_counts"

[kafka]
bootstrap = "127.0.0.1:1"           # overridden by KAFKA_BOOTSTRAP

[kafka.secrets]
"sasl.password" = {{ env = "TEST_RUN_PASSWORD" }}

[[inputs]]
name = "views"
topic = "{name}-views"
fields = ["user", "page"]
progress = "reclock"

[[outputs]]
name = "page_views"
topic = "{name}-counts"

[dead_letter]
topic = "{name}-dead"
""")
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_broker.bootstrap, "DDFLOW_METRICS_ADDRESS": "127.0.0.1:0",
           "TEST_RUN_PASSWORD": "do-not-print-this-7391"}
    result = subprocess.run([DDFLOW, "run", "--config", str(config), "--create-topics", "1", "--timeout", "3"],
                            capture_output=True, text=True, timeout=120, env=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f'"bootstrap": "{kafka_broker.bootstrap}"' in out
    assert '"sasl.password": "<secret from env TEST_RUN_PASSWORD>"' in out
    assert "do-not-print-this-7391" not in out
    assert re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", out).group(1) != "9464"  # type: ignore[union-attr]
    assert "created topics" in out


def test_run_without_a_secret_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text("""
[dataflow]
function = "ddflow.config.dataflows:page_counts"
[kafka]
bootstrap = "127.0.0.1:1"
[kafka.secrets]
"sasl.password" = { env = "TEST_RUN_UNSET_PASSWORD" }
[[inputs]]
name = "views"
topic = "views"
fields = ["user", "page"]
[[outputs]]
name = "page_views"
topic = "counts"
""")
    env = {k: v for k, v in os.environ.items() if k not in ("TEST_RUN_UNSET_PASSWORD", "KAFKA_BOOTSTRAP")}
    env["DDFLOW_METRICS_ADDRESS"] = "127.0.0.1:0"
    result = subprocess.run([DDFLOW, "run", "--config", str(config)], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 2
    assert f'{config}: kafka.secrets."sasl.password": environment variable TEST_RUN_UNSET_PASSWORD is not set' \
        in result.stderr
