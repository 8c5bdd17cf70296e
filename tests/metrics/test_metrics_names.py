"""Metrics that lead back to the code: arrangement and operator labels are the names a dataflow gives
(`Collection.name`, `Arranged.name`) or the operators' kinds and user functions' qualified names,
scraped over real HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ddflow.daemon.observe.health import EndpointServer
from ddflow.daemon.observe.metrics import DaemonMetrics
from ddflow.operators import Dataflow, GraphError
from support.docs import example


def parse_view(line: str) -> tuple[str, str]:
    user, page = line.split()
    return user, page


def scrape(dataflow: Dataflow) -> dict[tuple[str, str], float]:
    """``{(family, arrangement or operator label): value}`` from a real HTTP scrape of ``dataflow``."""
    registry = CollectorRegistry()
    DaemonMetrics(registry, inputs={"logs": "advance"}, outputs=["out"], arrangements=dataflow.arrangement_stats,
                  operators=dataflow.operator_stats)
    with EndpointServer(registry, port=0) as server, urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            label = s.labels.get("arrangement", s.labels.get("operator"))
            if label is not None:
                out[(s.name, label)] = s.value
    return out


def test_named_metrics_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    code = example("named-metrics", "python")
    exec(compile(code, "docs/dataflows.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    assert printed == code.rsplit("# ", 1)[1].strip()


def test_unnamed_operators_are_called_by_kind_and_function() -> None:
    df = Dataflow()
    logs = df.new_input("logs")
    views = logs.collection.map(parse_view)
    per_page = views.map(lambda v: (v[1], v[0])).count()  # a lambda: named with its file and line
    joined = views.join_map(views.filter(lambda v: v[0] != "bot"), lambda user, a, b: (user, a))
    again = logs.collection.map(parse_view).count()  # the same labels a second time: numbered
    for c in (per_page, joined, again):
        c.capture()
    logs.insert("ann /home", 1)
    logs.insert("bob /about", 1)
    logs.advance_to(2)
    df.run()
    v = scrape(df)
    first = test_unnamed_operators_are_called_by_kind_and_function.__code__.co_firstlineno
    swap = f"map(test_unnamed_operators_are_called_by_kind_and_function.<locals>.<lambda> test_metrics_names.py:{first + 4})"
    bots = f"filter(test_unnamed_operators_are_called_by_kind_and_function.<locals>.<lambda> test_metrics_names.py:{first + 5})"
    assert {name for family, name in v if family == "ddflow_operator_memo_records"} == {
        "map(parse_view)", "map(parse_view)#2", swap, bots}
    assert v[("ddflow_operator_memo_records", "map(parse_view)")] == 2
    assert {name for family, name in v if family == "ddflow_arrangement_records"} == {
        "map(parse_view).by_key", f"{bots}.by_key", f"{swap}.by_self", "count.output",
        "map(parse_view)#2.by_self", "count.output#2"}
    assert v[("ddflow_arrangement_records", "count.output")] == 2


def test_names_given_label_the_operator_and_its_arrangements() -> None:
    df = Dataflow()
    logs = df.new_input("logs")
    views = logs.collection.map(parse_view).name("views")
    pages = views.map(lambda v: (v[1], v[0])).arrange_by_key().name("by_page")
    loop = views.iterate(lambda r: r.name("frontier").distinct())  # an entered collection keeps its name
    for c in (views.count().name("views_per_user"), pages.count(), loop):
        c.capture()
    logs.insert("ann /home", 1)
    logs.advance_to(2)
    df.run()
    v = scrape(df)
    assert v[("ddflow_operator_memo_records", "views")] == 1
    assert v[("ddflow_arrangement_records", "views_per_user.output")] == 1
    assert v[("ddflow_arrangement_records", "views.by_self")] >= 1
    assert ("ddflow_arrangement_records", "by_page") in v
    assert ("ddflow_arrangement_records", "frontier.by_self") in v
    assert not any(name.startswith(("by_key", "by_self", "arrange")) for _, name in v), sorted(v)


def test_a_name_is_a_non_empty_str_given_before_the_first_run() -> None:
    df = Dataflow()
    logs = df.new_input("logs")
    views = logs.collection.map(parse_view)
    with pytest.raises(GraphError, match="non-empty str"):
        views.name("")
    with pytest.raises(GraphError, match="non-empty str"):
        views.arrange_by_key().name(None)  # type: ignore[arg-type]
    views.capture()
    df.run()
    with pytest.raises(GraphError, match="before df.run"):
        views.name("late")
