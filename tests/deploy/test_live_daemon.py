"""The deployment runs: ``ddflow run`` started with the StatefulSet's command and the rendered
ConfigMap on a real broker answers the pod's probes, exports every metric the dashboard and the
alerts use, and stops cleanly on the stop signal within the stop timeouts of the unit and pod."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from deploy_support import (ALERT_RULES, DASHBOARD, EDGE_TIMES, PROMETHEUS_SYNTHETIC, LiveDaemon,
                            grafana_to_promql, last, metric_names, unit)

pytestmark = pytest.mark.kafka


def test_pod_probes_answer_200(live_daemon: LiveDaemon) -> None:
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        path = live_daemon.container[probe]["httpGet"]["path"]
        status, body = live_daemon.get(path)
        assert status == 200, f"{probe} {path}: {status} {body}"


def test_scrape_has_every_series_the_dashboard_and_alerts_use(daemon_scrape: dict[str, str]) -> None:
    rules = [r for g in yaml.safe_load(ALERT_RULES.read_text())["groups"] for r in g["rules"]]
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
    used = set().union(*(metric_names(r["expr"]) for r in rules),
                       *(metric_names(grafana_to_promql(t["expr"])) for p in panels for t in p["targets"]))
    missing = used - set(daemon_scrape) - PROMETHEUS_SYNTHETIC
    assert not missing, f"not in a live scrape of ddflow run: {sorted(missing)}"
    assert len(used) > 15


def values(live_daemon: LiveDaemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = live_daemon.get("/metrics")
    assert status == 200, text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            if s.name.startswith("ddflow_"):
                assert labels.pop("worker") == "0", s  # one worker: worker 0
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def test_scrape_shows_the_edges_sent_becoming_final(live_daemon: LiveDaemon) -> None:
    frontier = ("ddflow_output_frontier_timestamp_seconds", (("output", "reachable"),))
    final = (EDGE_TIMES[-1] + 1_000_000) / 1e9  # the epoch holding the last edge is published
    deadline = time.monotonic() + 60
    while values(live_daemon)[frontier] < final and time.monotonic() < deadline:
        time.sleep(0.2)
    scraped = values(live_daemon)
    assert scraped[frontier] >= final, f"output frontier {scraped[frontier]} stays below {final}"
    assert scraped[("ddflow_input_frontier_timestamp_seconds", (("input", "edges"),))] >= final
    assert scraped[("ddflow_input_updates_total", (("input", "edges"),))] == len(EDGE_TIMES)
    assert scraped[("ddflow_output_updates_total", (("output", "reachable"),))] > 0
    assert scraped[("ddflow_ready", ())] == 1
    assert scraped[("ddflow_epochs_total", ())] >= 1
    assert scraped[("ddflow_last_epoch_timestamp_seconds", ())] > 1.6e9  # a unix time, not "unknown"


def test_stop_signal_exits_0_within_the_stop_timeouts(live_daemon: LiveDaemon, daemon_scrape: dict[str, str]) -> None:
    """It stops the session's daemon: ``daemon_scrape`` is taken first, so later tests still have it."""
    service = unit("ddflow.service")
    stop_signal = getattr(signal, last(service, "Service", "KillSignal"))
    grace = min(int(last(service, "Service", "TimeoutStopSec").rstrip("s")), 90)
    live_daemon.process.send_signal(stop_signal)
    try:
        code = live_daemon.process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ddflow run still running {grace} s after {stop_signal.name}: systemd and the kubelet "
                    f"would SIGKILL it\n{live_daemon.log.read_text()[-4000:]}")
    assert code == 0, live_daemon.log.read_text()[-4000:]
