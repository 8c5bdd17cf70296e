"""deploy/grafana: the dashboard is well-formed Grafana JSON whose panels tile the grid, whose
queries parse as PromQL, use only defined variables and only metrics the daemon exports, and
which shows what the issue asks for."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from deploy_support import (DASHBOARD, PROMETHEUS_SYNTHETIC, grafana_to_promql, grafana_variables, metric_names,
                            range_functions)

GRID_COLUMNS = 24
# throughput, frontier lag, epoch latency, arrangement sizes, dead letters, consumer lag (issue 8);
# the operators' memos and the per-partition frontiers (issue 25)
REQUIRED = {
    "ddflow_operator_memo_records", "ddflow_operator_memo_bytes", "ddflow_input_partition_frontier_timestamp_seconds",
    "ddflow_input_updates_total", "ddflow_output_updates_total",
    "ddflow_input_frontier_timestamp_seconds", "ddflow_output_frontier_timestamp_seconds",
    "ddflow_epoch_processing_seconds_bucket", "ddflow_end_to_end_latency_seconds_bucket",
    "ddflow_arrangement_records", "ddflow_arrangement_bytes", "ddflow_arrangement_batches",
    "ddflow_dead_letters_total", "ddflow_consumer_lag_messages",
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL as Grafana sends it) for every panel target."""
    return [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]


def variable_queries(dashboard: dict) -> list[str]:
    return [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def label_values_metric(definition: str) -> str:
    match = re.fullmatch(r"label_values\((\w+)(\{.*\})?, *\w+\)", definition)
    assert match, f"unexpected variable query {definition!r}"
    return match.group(1)


def overlapping(boxes: list[dict]) -> list[tuple[int, int]]:
    def cells(g: dict) -> set[tuple[int, int]]:
        return {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}

    return [(a["id"], b["id"]) for a, b in itertools.combinations(boxes, 2) if cells(a["gridPos"]) & cells(b["gridPos"])]


def test_dashboard_identity(dashboard: dict) -> None:
    assert dashboard["uid"] == "ddflow-overview" and dashboard["title"] == "ddflow"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["id"] is None, "an exported dashboard must not pin a database id"


def test_panels_tile_the_grid(dashboard: dict) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= GRID_COLUMNS, p["title"]
    assert overlapping(dashboard["panels"]) == []


def test_overlap_check_sees_an_overlap() -> None:
    boxes = [{"id": 1, "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}},
             {"id": 2, "gridPos": {"x": 11, "y": 7, "w": 4, "h": 4}}]
    assert overlapping(boxes) == [(1, 2)]


def test_every_panel_queries_the_selected_data_source(dashboard: dict) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in panels(dashboard):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]


def test_queries_use_only_defined_variables(dashboard: dict) -> None:
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for title, expr in queries(dashboard):
        assert grafana_variables(expr) <= defined, f"{title}: undefined variable in {expr!r}"


def test_queries_parse_as_promql(dashboard: dict) -> None:
    for title, expr in queries(dashboard):
        try:
            metric_names(grafana_to_promql(expr))
        except ValueError as exc:
            raise AssertionError(f"{title}: {expr!r} does not parse: {exc}") from exc


def test_dashboard_uses_only_metrics_the_daemon_exports(dashboard: dict, daemon_scrape: dict[str, str]) -> None:
    used = set().union(*(metric_names(grafana_to_promql(expr)) for _, expr in queries(dashboard)))
    used |= {label_values_metric(d) for d in variable_queries(dashboard)}
    unknown = used - set(daemon_scrape) - PROMETHEUS_SYNTHETIC
    assert not unknown, f"the dashboard queries metrics the daemon does not export: {sorted(unknown)}"
    assert REQUIRED <= used, f"the dashboard does not show {sorted(REQUIRED - used)}"


def test_functions_fit_the_metric_types(dashboard: dict, daemon_scrape: dict[str, str]) -> None:
    for title, expr in queries(dashboard):
        for function, metric in range_functions(grafana_to_promql(expr)):
            kind = daemon_scrape.get(metric, "synthetic")
            if function in {"rate", "irate", "increase"}:
                assert kind in {"counter", "histogram"}, f"{title}: {function}() of {kind} {metric}"
            if metric.endswith("_bucket"):
                assert "histogram_quantile" in expr, f"{title}: buckets need histogram_quantile"
