"""A first ``ddflow run`` on an empty kernel cache: exact results before its kernels are compiled.

The daemon compiles the kernels in processes of its own while its worker runs them as Python
(``ddflow.operators.kernels.interpreted``), so its first epochs are published while the compiler
is still at work; SIGTERM then stops the compilation with the daemon (no process of it left).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.broker import FETCH_WAIT_MS
from support.daemons import MS, Daemon

from ddflow.daemon.cli.demo import reachable_pairs
from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

from test_cli_run import T0, write_config  # type: ignore[import-not-found]

pytestmark = pytest.mark.kafka


def children(pid: int) -> set[int]:
    """The processes ``pid`` started that still run (its compiler's among them)."""
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out.update(int(p) for p in f.read().split())
    return out


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_cold_start_publishes_exact_results_while_its_kernels_compile(
        kafka_broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    edges, results, dead = make_topic("edges"), make_topic("reachable"), make_topic("dead")
    config = write_config(tmp_path, bootstrap, edges, results, dead)
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "kernels")}  # empty: a first run
    daemon = Daemon(config, env=env)
    try:
        daemon.wait_for(r"compiling kernels \(first run\): 0/(\d+)")
        daemon.wait_for(r"worker open")
        window = [(0, 1), (1, 2), (2, 3), (5, 6), (6, 0), (1, 2), (3, 4), (4, 0)]
        with UpdateProducer(edges, options) as producer, ResultClient(results, options) as client:
            for k, edge in enumerate(window):
                producer.insert(edge, T0 + k)
            producer.advance_to(T0 + 2 * MS)
            producer.flush()
            assert client.wait_for(T0 + 2 * MS, timeout=120), daemon.log
            assert client.view == dict.fromkeys(reachable_pairs(window, range(2)), 1)
            producer.remove((3, 4), T0 + 2 * MS + 5)
            producer.advance_to(T0 + 3 * MS)
            producer.flush()
            assert client.wait_for(T0 + 3 * MS, timeout=120), daemon.log
            window.remove((3, 4))
            assert client.view == dict.fromkeys(reachable_pairs(window, range(2)), 1)
        compiling = children(daemon.process.pid)
        assert "kernels compiled" not in daemon.log and compiling, daemon.log  # the results came first
        status, text = daemon.get("/metrics")
        interpreted = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == "ddflow_kernels_interpreted"]
        assert status == 200 and interpreted and interpreted[0] > 0, text
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0, daemon.log
        daemon.until(lambda: not any(running(pid) for pid in compiling), "the compiler's processes ended", 30)
    finally:
        daemon.kill()


def test_a_cold_daemon_killed_leaves_no_compiler_behind(
        kafka_broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path) -> None:
    config = write_config(tmp_path, kafka_broker.bootstrap, make_topic("edges"), make_topic("reachable"),
                          make_topic("dead"))
    daemon = Daemon(config, env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "kernels")})
    try:
        daemon.wait_for(r"compiling kernels \(first run\): 0/")
        daemon.until(lambda: len(children(daemon.process.pid)) >= 2, "the compiler's processes started", 60)
        compiling = children(daemon.process.pid)
        daemon.until(lambda: sum(cpu_seconds(pid) for pid in compiling) > 4, "the compilers at work", 60)
        daemon.process.kill()
        daemon.process.wait(timeout=30)
        # at once, not after the kernels they were compiling (merge.cascade alone takes 10-20 s)
        daemon.until(lambda: not any(running(pid) for pid in compiling), "the compiler's processes ended", 5)
    finally:
        daemon.kill()
