"""Arrangement gauges come from the real engine at scrape time, over real HTTP."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ddflow.config.dataflows import reachability
from ddflow.daemon.observe.health import EndpointServer
from ddflow.daemon.observe.metrics import DaemonMetrics
from ddflow.operators import Dataflow


def scrape(url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, s.labels.get("arrangement", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_arrangement_families_follow_the_dataflow_between_scrapes() -> None:
    df = Dataflow()
    edges = df.new_input("edges")
    reachability(df, {"edges": edges.collection}, roots=[0])["reachable"].capture()
    registry = CollectorRegistry()
    DaemonMetrics(registry, inputs={"edges": "advance"}, outputs=["reachable"], arrangements=df.arrangement_stats)
    with EndpointServer(registry, port=0) as server:
        t = 1
        for i in range(200):
            edges.insert((i, i + 1), t)
            t += 1
        edges.advance_to(t)
        df.run()
        first = scrape(server.url)
        expected = df.arrangement_stats()
        assert expected, "the reachability dataflow arranges its inputs"
        for name, row in expected.items():
            assert first[("ddflow_arrangement_records", name)] == row["records"]
            assert first[("ddflow_arrangement_batches", name)] == row["batches"]
            assert first[("ddflow_arrangement_bytes", name)] == row["bytes"]
            assert first[("ddflow_compaction_merge_records_total", name)] == row["merge_work"]
        for i in range(200):
            edges.remove((i, i + 1), t)
            t += 1
        edges.advance_to(t)
        df.run()
        second = scrape(server.url)
    later = df.arrangement_stats()
    for name, row in later.items():
        assert second[("ddflow_arrangement_records", name)] == row["records"]
        assert second[("ddflow_compaction_merge_records_total", name)] >= first.get(
            ("ddflow_compaction_merge_records_total", name), 0)
    assert later != expected
