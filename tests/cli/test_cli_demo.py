"""``ddflow demo`` for a bounded time: its result view is checked, its endpoints answer while it runs."""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request

import pytest
from support.daemons import DDFLOW
from test_cli_basics import ddflow  # type: ignore[import-not-found]

from ddflow.daemon.kafka.broker import EmbeddedBroker

pytestmark = pytest.mark.kafka

SMALL = ["--nodes", "100", "--edges", "200", "--roots", "3"]


def test_demo_on_its_embedded_broker_for_a_duration_serves_metrics_and_checks_its_view() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    process = subprocess.Popen([DDFLOW, "--log-level", "WARNING", "demo", *SMALL, "--duration", "8", "--rate", "20"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith("metrics: "):
                break
        assert lines[0].startswith("broker: embedded tansu at 127.0.0.1:"), lines
        url = re.match(r"metrics: (http://\S+)/metrics", lines[-1]).group(1)  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                    ready = response.status == 200
            except OSError:
                time.sleep(0.2)
        assert ready, "the demo's daemon never became ready"
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            text = response.read().decode()
        assert re.search(r'^ddflow_input_updates_total\{input="edges",worker="0"\} [1-9]', text, flags=re.M), text
        rest = process.communicate(timeout=300)[0]
        lines.append(rest)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = "".join(lines)
    assert process.returncode == 0, out
    assert "check: the result view equals a breadth-first search over the final window: OK" in out
    assert re.search(r"changes sent \d+", out), "the progress line is printed while it runs"
    assert re.search(r"end-to-end latency .*: p50 [\d.]+ ms, p99 [\d.]+ ms", out), out


def test_demo_with_max_updates_on_the_broker_from_kafka_bootstrap(kafka_broker: EmbeddedBroker) -> None:
    result = ddflow("--log-level", "WARNING", "demo", *SMALL, "--max-updates", "60", "--rate", "0", "--quiet",
                    env={"KAFKA_BOOTSTRAP": kafka_broker.bootstrap}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"broker: {kafka_broker.bootstrap} (from --bootstrap/KAFKA_BOOTSTRAP)" in result.stdout
    assert "changes: 60 edge changes" in result.stdout
    assert "check: the result view equals a breadth-first search over the final window: OK" in result.stdout


def test_demo_ctrl_c_stops_sending_waits_for_the_output_and_checks_it() -> None:
    """Ctrl-C as a terminal sends it: SIGINT to the whole process group (the embedded broker too)."""
    import signal

    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    process = subprocess.Popen([DDFLOW, "--log-level", "WARNING", "demo", *SMALL, "--rate", "20"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if re.search(r"changes sent [1-9]", line):  # running and sending
                break
        os.killpg(process.pid, signal.SIGINT)
        out = process.communicate(timeout=300)[0]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, out
    assert "stopping: waiting for the last changes to be final" in out
    assert "check: the result view equals a breadth-first search over the final window: OK" in out
