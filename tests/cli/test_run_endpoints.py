"""The metrics endpoints of ``ddflow run`` cannot be used to starve the worker: hundreds of
half-sent requests against a daemon limited to 256 file descriptors leave it publishing epochs and
writing checkpoints, its probes answer 200 throughout, and a scrape gets through."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.broker import FETCH_WAIT_MS
from support.daemons import DDFLOW, MS
from test_cli_run import T0, http, write_config  # type: ignore[import-not-found]

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka

FD_LIMIT = 256
HELD = 300


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _fds(pid: int) -> int:
    """The process's open descriptors: the least of 10 looks over ~0.5 s. A checkpoint (every 200 ms
    here) opens files for a moment, and a clean-clone run once counted 5 such beside the 8 held."""
    counts = []
    for _ in range(10):
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.05)
    return min(counts)


def test_half_sent_requests_never_starve_the_worker(
        kafka_broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    edges, results, dead = make_topic("edges"), make_topic("reachable"), make_topic("dead")
    config = write_config(tmp_path, bootstrap, edges, results, dead)
    config.write_text(config.read_text() + 'max_connections = 8\nrequest_timeout = "2s"\n\n'
                      f'[checkpoint]\nlocation = "{tmp_path / "checkpoints"}"\ninterval = "200ms"\n')
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    lines: list[str] = []
    process = subprocess.Popen([DDFLOW, "run", "--config", str(config)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=_limit_fds)
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"metrics on http://([\d.]+):(\d+)/metrics", "".join(lines))):
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.05)
        address = (match.group(1), int(match.group(2)))
        url = f"http://{address[0]}:{address[1]}"
        with UpdateProducer(edges, options) as producer:
            producer.insert((0, 1), T0)
            producer.advance_to(T0 + MS)
        with ResultClient(results, options) as client:
            assert client.wait_for(T0 + MS, timeout=120), "".join(lines)
        baseline = _fds(process.pid)

        for _ in range(HELD):  # each sends the start of a request, then nothing
            sock = socket.create_connection(address, timeout=10)
            with contextlib.suppress(OSError):
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: probe\r\n")
            held.append(sock)
        held_fds = _fds(process.pid)
        assert held_fds <= baseline + 8 + 4, (baseline, held_fds)  # the cap, plus a socket being accepted
        assert [http(url + "/healthz")[0] for _ in range(20)] == [200] * 20  # probes are answered first

        # while they are held, the worker goes on: epochs published, checkpoints written
        checkpoints = len(re.findall(r"checkpoint checkpoint-\d+ at frontier", "".join(lines)))
        with UpdateProducer(edges, options) as producer:
            producer.insert((1, 2), T0 + 2 * MS)
            producer.advance_to(T0 + 3 * MS)
        with ResultClient(results, options) as client:
            assert client.wait_for(T0 + 3 * MS, timeout=120), "".join(lines)
            assert client.view == {(0, 0): 1, (0, 1): 1, (0, 2): 1, (1, 1): 1, (1, 2): 1}
        deadline = time.monotonic() + 60
        while len(re.findall(r"checkpoint checkpoint-\d+ at frontier", "".join(lines))) <= checkpoints:
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.1)

        # the held connections are cut at their deadline: a scrape answers
        status = None
        deadline = time.monotonic() + 60
        while status != 200:
            assert time.monotonic() < deadline, "".join(lines)
            try:
                status, text = http(url + "/metrics")
            except OSError:
                time.sleep(0.2)
        assert "ddflow_epochs_total" in text
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, "".join(lines)
        assert "Too many open files" not in "".join(lines)
    finally:
        for sock in held:
            sock.close()
        if process.poll() is None:
            process.kill()
            process.wait()
