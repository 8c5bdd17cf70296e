"""Metrics and health endpoints over real HTTP: names per METRICS.md, known series at 0, values as set."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ddflow.daemon.observe.health import EndpointServer
from ddflow.daemon.observe.metrics import METRIC_NAMES, DaemonMetrics, MetricsSnapshot

EXPECTED = {
    "ddflow_build_info", "ddflow_input_updates_total", "ddflow_output_updates_total", "ddflow_epochs_total",
    "ddflow_epoch_processing_seconds", "ddflow_end_to_end_latency_seconds",
    "ddflow_input_frontier_timestamp_seconds", "ddflow_input_partition_frontier_timestamp_seconds",
    "ddflow_output_frontier_timestamp_seconds",
    "ddflow_last_epoch_timestamp_seconds", "ddflow_worker_loop_timestamp_seconds", "ddflow_consumer_lag_messages", "ddflow_arrangement_records",
    "ddflow_arrangement_batches", "ddflow_arrangement_bytes", "ddflow_compaction_merge_records_total",
    "ddflow_operator_memo_records", "ddflow_operator_memo_bytes",
    "ddflow_late_updates_total", "ddflow_dead_letters_total", "ddflow_input_tombstones_total", "ddflow_ready",
    "ddflow_broker_answering", "ddflow_broker_last_answer_timestamp_seconds",
    "ddflow_exchange_wait_seconds_total", "ddflow_exchange_waiting",
    "ddflow_mesh_peer_lost", "ddflow_kernels_interpreted",
}


def get(url: str, accept: str = "") -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def samples(text: str, worker: str = "0") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every ddflow sample by name and labels, its ``worker`` label checked and left out."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            if s.name.startswith("ddflow_"):
                assert labels.pop("worker", None) == worker, s
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def families(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_metric_names_are_the_fixed_set() -> None:
    assert set(METRIC_NAMES) == EXPECTED and len(METRIC_NAMES) == len(EXPECTED)


def test_fresh_daemon_exports_every_family_with_known_series_at_zero(registry: CollectorRegistry) -> None:
    DaemonMetrics(registry, inputs={"edges": "reject", "roots": "advance"}, outputs=["reachable"],
                  dead_letter_reasons=["malformed", "late"])
    with EndpointServer(registry, port=0) as server:
        status, content_type, text = get(server.url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    assert families(text) == EXPECTED
    values = samples(text)
    assert values[("ddflow_input_updates_total", (("input", "edges"),))] == 0
    assert values[("ddflow_input_updates_total", (("input", "roots"),))] == 0
    assert values[("ddflow_output_updates_total", (("output", "reachable"),))] == 0
    assert values[("ddflow_late_updates_total", (("input", "edges"), ("policy", "reject")))] == 0
    assert values[("ddflow_dead_letters_total", (("input", "roots"), ("reason", "late")))] == 0
    assert values[("ddflow_input_tombstones_total", (("input", "roots"),))] == 0
    assert values[("ddflow_epochs_total", ())] == 0
    assert values[("ddflow_ready", ())] == 0
    assert values[("ddflow_end_to_end_latency_seconds_count", ())] == 0
    build = [k for k in values if k[0] == "ddflow_build_info"]
    assert len(build) == 1 and dict(build[0][1])["version"]


def test_scrape_reports_the_values_the_worker_holds(registry: CollectorRegistry) -> None:
    snapshot = MetricsSnapshot(
        input_updates={"edges": 1234},
        output_updates={"reachable": 77},
        epochs=9,
        input_frontier_ns={"edges": 1_700_000_000_500_000_000},
        output_frontier_ns={"reachable": 1_700_000_000_000_000_000},
        last_epoch_wall=1_700_000_123.25,
        loop_wall=1_700_000_124.5,
        consumer_lag={("edges", 0): 5, ("edges", 1): 0},
        late_updates={("edges", "reject"): 3},
        dead_letters={("edges", "malformed"): 2},
        ready=True,
    )
    arrangement_stats = {"reach": {"records": 40, "batches": 3, "bytes": 4096, "merge_work": 120}}
    metrics = DaemonMetrics(registry, inputs={"edges": "reject"}, outputs=["reachable"],
                            dead_letter_reasons=["malformed", "late"], snapshot=lambda: snapshot,
                            arrangements=lambda: arrangement_stats)
    metrics.observe_epoch(0.003, [0.0004, 0.002, 0.002, 40.0])
    metrics.observe_epoch(0.0001, [])
    with EndpointServer(registry, port=0) as server:
        text = get(server.url + "/metrics")[2]
        openmetrics = get(server.url + "/metrics", accept="application/openmetrics-text; version=1.0.0")
    v = samples(text)
    assert v[("ddflow_input_updates_total", (("input", "edges"),))] == 1234
    assert v[("ddflow_output_updates_total", (("output", "reachable"),))] == 77
    assert v[("ddflow_epochs_total", ())] == 9
    assert v[("ddflow_input_frontier_timestamp_seconds", (("input", "edges"),))] == pytest.approx(1_700_000_000.5)
    assert v[("ddflow_output_frontier_timestamp_seconds", (("output", "reachable"),))] == pytest.approx(1.7e9)
    assert v[("ddflow_last_epoch_timestamp_seconds", ())] == 1_700_000_123.25
    assert v[("ddflow_worker_loop_timestamp_seconds", ())] == 1_700_000_124.5
    assert v[("ddflow_consumer_lag_messages", (("partition", "0"), ("topic", "edges")))] == 5
    assert v[("ddflow_late_updates_total", (("input", "edges"), ("policy", "reject")))] == 3
    assert v[("ddflow_dead_letters_total", (("input", "edges"), ("reason", "malformed")))] == 2
    assert v[("ddflow_dead_letters_total", (("input", "edges"), ("reason", "late")))] == 0
    assert v[("ddflow_ready", ())] == 1
    assert v[("ddflow_arrangement_records", (("arrangement", "reach"),))] == 40
    assert v[("ddflow_arrangement_batches", (("arrangement", "reach"),))] == 3
    assert v[("ddflow_arrangement_bytes", (("arrangement", "reach"),))] == 4096
    assert v[("ddflow_compaction_merge_records_total", (("arrangement", "reach"),))] == 120
    assert v[("ddflow_epoch_processing_seconds_count", ())] == 2
    assert v[("ddflow_epoch_processing_seconds_sum", ())] == pytest.approx(0.0031)
    latency = "ddflow_end_to_end_latency_seconds_bucket"
    assert v[(latency, (("le", "0.0005"),))] == 1
    assert v[(latency, (("le", "0.0025"),))] == 3  # 0.002 twice, cumulative; le is inclusive
    assert v[(latency, (("le", "30.0"),))] == 3
    assert v[(latency, (("le", "+Inf"),))] == 4
    status, content_type, body = openmetrics
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


def test_frontiers_read_zero_before_any_progress(registry: CollectorRegistry) -> None:
    least = -(1 << 63)  # an input whose partitions sent no marker yet; the first epoch's lower
    snapshot = MetricsSnapshot(input_frontier_ns={"edges": least}, output_frontier_ns={"reachable": least},
                               partition_frontier_ns={("edges", 0): least, ("edges", 1): 2_000_000_000,
                                                      ("edges", 2): None})
    DaemonMetrics(registry, inputs={"edges": "reject"}, outputs=["reachable"], dead_letter_reasons=["late"],
                  snapshot=lambda: snapshot)
    with EndpointServer(registry, port=0) as server:
        v = samples(get(server.url + "/metrics")[2])
    assert v[("ddflow_input_frontier_timestamp_seconds", (("input", "edges"),))] == 0
    assert v[("ddflow_output_frontier_timestamp_seconds", (("output", "reachable"),))] == 0
    # per partition: the one holding the input back is the one at 0
    assert [v[("ddflow_input_partition_frontier_timestamp_seconds", (("input", "edges"), ("partition", p)))]
            for p in "012"] == [0, 2, 0]


def test_a_failing_snapshot_still_serves_known_series(registry: CollectorRegistry) -> None:
    def broken() -> MetricsSnapshot:
        raise RuntimeError("worker gone")

    DaemonMetrics(registry, inputs={"edges": "advance"}, outputs=["out"], snapshot=broken)
    with EndpointServer(registry, port=0) as server:
        status, _, text = get(server.url + "/metrics")
    assert status == 200
    assert samples(text)[("ddflow_input_updates_total", (("input", "edges"),))] == 0


def test_health_and_readiness_follow_their_probes(registry: CollectorRegistry) -> None:
    state = {"alive": True, "ready": (False, "waiting for partition assignment")}
    with EndpointServer(registry, port=0, alive=lambda: (state["alive"], "worker loop running"),
                        ready=lambda: state["ready"]) as server:
        assert get(server.url + "/healthz")[::2] == (200, "worker loop running\n")
        assert get(server.url + "/readyz")[::2] == (503, "waiting for partition assignment\n")
        state["ready"] = (True, "ready")
        assert get(server.url + "/readyz")[::2] == (200, "ready\n")
        state["alive"] = False
        assert get(server.url + "/healthz")[0] == 503
        assert get(server.url + "/nope")[0] == 404


def test_a_raising_probe_is_a_failing_probe(registry: CollectorRegistry) -> None:
    def probe() -> tuple[bool, str]:
        raise ValueError("no worker")

    with EndpointServer(registry, port=0, ready=probe) as server:
        status, _, body = get(server.url + "/readyz")
    assert status == 503 and "ValueError: no worker" in body


def test_port_in_use_names_the_address(registry: CollectorRegistry) -> None:
    with EndpointServer(registry, port=0) as server:
        host, port = server.address
        with pytest.raises(OSError, match=f"cannot serve metrics on {host}:{port}"):
            EndpointServer(registry, host=host, port=port)


def _half_sent(server: EndpointServer, count: int) -> list[socket.socket]:
    """``count`` connections that send the start of a request and then nothing (slowloris)."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(server.address, timeout=5)
        with contextlib.suppress(OSError):  # a refused one may already be closed by the server
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: probe\r\n")
        held.append(sock)
    return held


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} after {timeout} s"
        time.sleep(0.05)


def test_probes_answer_while_hundreds_of_half_sent_requests_are_held(registry: CollectorRegistry) -> None:
    """A slowloris flood (200 connections that send the start of a request, then nothing) holds no
    thread and at most max_connections sockets (the oldest are evicted), and every probe among it
    answers 200 at once. Before, the flood took every slot and 20 of 20 probes answered 503."""
    DaemonMetrics(registry, inputs={"edges": "reject"}, outputs=["reachable"], dead_letter_reasons=["late"])
    threads_before = threading.active_count()
    with EndpointServer(registry, port=0, max_connections=4, request_timeout=30.0) as server:
        held = _half_sent(server, 200)
        try:
            _until(lambda: server.evicted == 196, "the oldest half-sent requests were not evicted")
            assert server.pending == 4 and server.connections == 0
            assert [get(server.url + "/healthz")[0] for _ in range(20)] == [200] * 20
            assert get(server.url + "/readyz")[:3:2] == (503, "not started\n")  # answered, with its reason
            assert server.probes == 21
            assert threading.active_count() <= threads_before + 1  # the server's thread, none per connection
            assert get(server.url + "/metrics")[0] == 200  # a scrape too, in a thread of its own
            assert server.pending <= 4
        finally:
            for sock in held:
                sock.close()


def test_half_sent_requests_are_cut_at_their_deadline(registry: CollectorRegistry) -> None:
    with EndpointServer(registry, port=0, max_connections=4, request_timeout=0.5) as server:
        held = _half_sent(server, 3)
        try:
            _until(lambda: server.pending == 0, "the half-sent requests were not cut")
            for sock in held:  # the server closed them
                sock.settimeout(5)
                assert sock.recv(10) == b""
        finally:
            for sock in held:
                sock.close()


def test_a_request_beyond_max_connections_threads_gets_a_503_and_probes_still_answer(
        registry: CollectorRegistry) -> None:
    release = threading.Event()
    entered = threading.Event()

    class Slow:  # a collector that holds /metrics until released
        def collect(self):  # type: ignore[no-untyped-def]
            entered.set()
            release.wait(30)
            return []

    registry.register(Slow())  # type: ignore[arg-type]
    with EndpointServer(registry, port=0, max_connections=1, request_timeout=30.0) as server:
        first = threading.Thread(target=lambda: get(server.url + "/metrics"), daemon=True)
        first.start()
        try:
            assert entered.wait(10)
            _until(lambda: server.connections == 1, "the first scrape was not served")
            assert get(server.url + "/metrics")[0] == 503 and server.refused == 1
            assert get(server.url + "/healthz")[0] == 200  # probes are not served by the threads
        finally:
            release.set()
            first.join(10)
        _until(lambda: server.connections == 0, "a finished request kept its slot")
        assert get(server.url + "/metrics")[0] == 200


@pytest.mark.parametrize(("kwargs", "fragment"), [({"max_connections": 0}, "max_connections"),
                                                 ({"request_timeout": 0}, "request_timeout")])
def test_bounds_must_be_positive(registry: CollectorRegistry, kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        EndpointServer(registry, port=0, **kwargs)  # type: ignore[arg-type]


def test_a_worker_of_several_labels_its_series_and_names_the_peers_it_waits_for(registry: CollectorRegistry) -> None:
    snapshot = MetricsSnapshot(epochs=4, exchange_waited={0: 2.5}, exchange_waiting_on=(2,))
    DaemonMetrics(registry, inputs={"edges": "reject"}, outputs=["out"], snapshot=lambda: snapshot,
                  worker=1, workers=3)
    with EndpointServer(registry, port=0) as server:
        v = samples(get(server.url + "/metrics")[2], worker="1")
    assert v[("ddflow_epochs_total", ())] == 4
    assert v[("ddflow_exchange_wait_seconds_total", (("peer", "0"),))] == 2.5
    assert v[("ddflow_exchange_wait_seconds_total", (("peer", "2"),))] == 0
    assert v[("ddflow_exchange_waiting", (("peer", "0"),))] == 0
    assert v[("ddflow_exchange_waiting", (("peer", "2"),))] == 1
    assert not [k for k in v if k[0].startswith("ddflow_exchange") and ("peer", "1") in k[1]]  # never itself
