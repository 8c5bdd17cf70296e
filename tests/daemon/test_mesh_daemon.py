"""``ddflow run`` workers over the mesh (``[workers] addresses``) on the real broker: the result
topic's view at every frontier equals the engine's; a worker killed is waited for, then reported
lost by name by the others (their /readyz and metrics say so), which stop; all restarted, they
replay their inputs and the results stay exact."""

from __future__ import annotations

import re
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_workers_daemon import MS, T0, Daemons, config, oracle, stream  # noqa: E402

from ddflow.daemon.kafka.producer import UpdateProducer  # noqa: E402
from ddflow.daemon.kafka.results import ResultClient  # noqa: E402
from support.broker import FETCH_WAIT_MS  # noqa: E402

pytestmark = pytest.mark.kafka


def mesh_config(tmp_path: Path, *args) -> Path:
    """`config` over the mesh; a worker loop stuck for 20 s says so on ``/healthz`` (see `probes`)."""
    path = config(tmp_path, *args)
    path.write_text(path.read_text() + f'addresses = "ipc://{tmp_path}/mesh-{{index}}"\npeer_timeout = "10s"\n'
                    '\n[worker]\nstall_timeout = "20s"\n')
    return path


def probes(daemons: Daemons) -> str:
    """What each running worker's ``/healthz`` and ``/readyz`` say (for a failure's message): what a
    worker loop is stuck in, which peers it waits for."""
    out = []
    for i, lines in enumerate(daemons.logs):
        found = re.findall(r"metrics on (http://\S+)/metrics", "".join(lines))
        if found:
            out += [f"worker {i} {path}: {' '.join(map(str, http(found[-1] + path)))}" for path in ("/healthz", "/readyz")]
    return "\n".join(out)


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def check(client, want, final: int, daemons: Daemons) -> None:
    frontiers = []
    for change in client.changes(timeout=120):
        frontiers.append(change.frontier)
        assert client.view == want.at(change.frontier - 1), (change.frontier, daemons.log())
        if change.frontier >= final:
            break
    assert frontiers and frontiers[-1] >= final, f"{probes(daemons)}\n{daemons.log()}"
    assert client.view == want.at(final - 1) and client.view


def exact_run(kafka_broker, make_topic, tmp_path, flow: str, workers: int) -> Daemons:
    """``workers`` mesh workers fed ``flow``'s stream: the result topic's view at every frontier is
    the engine's, and every worker exits 0 on SIGTERM. Returns them (their logs) once stopped."""
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, results, dead = make_topic("in", 4), make_topic("out", 3), make_topic("dead")
    rounds = stream(flow)
    want = oracle(flow, rounds)
    daemons = Daemons(mesh_config(tmp_path, bootstrap, flow, workers, source, results, dead), workers)
    try:
        with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
            for r, ups in enumerate(rounds):
                for record, t, d in ups:
                    producer.send(record, t, d)
                producer.advance_to(T0 + 10 * (r + 1) * MS)
                producer.flush()
            check(client, want, T0 + 10 * len(rounds) * MS, daemons)
    finally:
        codes = daemons.stop()
    assert codes == [0] * workers, daemons.log()
    return daemons


@pytest.mark.parametrize("flow,workers", [("reachability", 2), ("count-per-page", 3)])
def test_mesh_workers_through_ddflow_run_equal_the_engine(kafka_broker, make_topic, tmp_path, flow, workers):
    daemons = exact_run(kafka_broker, make_topic, tmp_path, flow, workers)
    assert all(f"mesh at ipc://{tmp_path}/mesh-{i}" in "".join(daemons.logs[i]) for i in range(workers)), daemons.log()


def test_mesh_workers_on_a_cold_kernel_cache_equal_the_engine(kafka_broker, make_topic, tmp_path, monkeypatch):
    """Two workers started together on an empty kernel cache: one compiles (the other waits for its
    cache), both run the kernels as Python meanwhile, and the results are exact."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "kernels"))
    daemons = exact_run(kafka_broker, make_topic, tmp_path, "reachability", 2)
    said = "kernels are not in the kernel cache yet: each runs as Python"
    assert all(said in "".join(lines) for lines in daemons.logs), daemons.log()


def test_a_killed_mesh_worker_is_reported_lost_and_all_restarted_replay_exactly(kafka_broker, make_topic, tmp_path):
    bootstrap = kafka_broker.bootstrap
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    source, results, dead = make_topic("in", 4), make_topic("out", 3), make_topic("dead")
    rounds = stream("reachability", rounds=4)
    want = oracle("reachability", rounds)
    path = mesh_config(tmp_path, bootstrap, "reachability", 2, source, results, dead)
    daemons = Daemons(path, 2)
    with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
        try:
            for r, ups in enumerate(rounds[:2]):
                for record, t, d in ups:
                    producer.send(record, t, d)
                producer.advance_to(T0 + 10 * (r + 1) * MS)
                producer.flush()
            check(client, want, T0 + 20 * MS, daemons)
            url = re.findall(r"metrics on (http://[\d.]+:\d+)/metrics", "".join(daemons.logs[0]))[-1]
            daemons.processes[1].send_signal(signal.SIGKILL)
            # a round to agree on: worker 0 waits for worker 1 in that agreement, not ready, and its
            # metrics name the peer; peer_timeout later it is lost (/readyz says so until the process
            # exits: too short a window to be sure of seeing when idle workers notice by heartbeats alone)
            for record, t, d in rounds[2]:
                producer.send(record, t, d)
            producer.advance_to(T0 + 30 * MS)
            producer.flush()
            deadline = time.monotonic() + 30
            status, body = http(url + "/readyz")
            while not (status == 503 and re.search(r"for workers \[1\]|peers lost: worker 1", body)):
                assert time.monotonic() < deadline, (status, body, daemons.log())
                time.sleep(0.05)
                status, body = http(url + "/readyz")
            if "for workers [1]" in body:
                metrics = http(url + "/metrics")[1]
                assert (re.search(r'ddflow_exchange_waiting\{peer="1",worker="0"\} 1\.0', metrics)
                        or re.search(r'ddflow_mesh_peer_lost\{[^}]*peer="1"[^}]*\} 1\.0', metrics)
                        or not metrics), metrics
            deadline = time.monotonic() + 60
            while daemons.processes[0].poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert daemons.processes[0].poll() not in (None, 0), daemons.log()  # it stopped, failing
            assert f"heard nothing from worker 1 (ipc://{tmp_path}/mesh-1)" in "".join(daemons.logs[0]), daemons.log()
        finally:
            daemons.stop()
        restarted = Daemons(path, 2)  # as their supervisors would
        try:
            for r, ups in enumerate(rounds[3:], start=3):
                for record, t, d in ups:
                    producer.send(record, t, d)
                producer.advance_to(T0 + 10 * (r + 1) * MS)
                producer.flush()
            check(client, want, T0 + 10 * len(rounds) * MS, restarted)
        finally:
            codes = restarted.stop()
        assert codes == [0, 0], restarted.log()


def test_sigterm_while_waiting_for_a_peer_at_start_exits_0_at_once(kafka_broker, make_topic, tmp_path):
    """One worker of two started alone waits for its peer at the mesh's start-up barrier; SIGTERM
    there ends the wait and the daemon exits 0 (nothing was published), without waiting out
    worker.stop_timeout (before: the barrier ignored the stop until stop_timeout killed it)."""
    source, results, dead = make_topic("in", 2), make_topic("out", 2), make_topic("dead")
    path = mesh_config(tmp_path, kafka_broker.bootstrap, "reachability", 2, source, results, dead)
    text = path.read_text().replace('wait_timeout = "60s"', 'wait_timeout = "5m"')
    path.write_text(text.replace('[worker]\n', '[worker]\nstop_timeout = "60s"\n'))
    daemons = Daemons(path, 1)  # worker 0 only: worker 1 never comes
    try:
        deadline = time.monotonic() + 180
        while "metrics on http" not in "".join(daemons.logs[0]):  # the endpoints answer: the worker opens
            assert time.monotonic() < deadline and daemons.processes[0].poll() is None, daemons.log()
            time.sleep(0.1)
        deadline = time.monotonic() + 10  # then it says it waits (SIGTERM is due in any state of opening)
        while "waiting for the other workers over the mesh" not in "".join(daemons.logs[0]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        daemons.processes[0].send_signal(signal.SIGTERM)
        assert daemons.processes[0].wait(timeout=20) == 0, daemons.log()
    finally:
        daemons.stop()
    assert "stopped while opening (mesh: worker 0 stopped while waiting at start-up for worker 1" in daemons.log()
