"""deploy/prometheus: the alert rules parse (promtool, a strict schema, a PromQL parser), fire on the
situations they describe (promtool unit tests), and select only metrics the daemon exports."""

from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import promql_parser
import pytest
import yaml

from deploy_support import (ALERT_RULES, ALERT_TESTS, KUBERNETES, PROMETHEUS_SYNTHETIC, RULE_FILE_SCHEMA,
                            metric_names, range_functions, run)

REQUIRED_ALERTS = {  # frontier stalled, consumer lag growing, dead letters appearing, daemon down, loop stopped,
    "DdflowFrontierStalled", "DdflowConsumerLagGrowing", "DdflowDeadLetters", "DdflowDaemonDown",  # a worker
    "DdflowWorkerLoopStalled", "DdflowWorkerHoldsOthersBack",  # that holds the others back
}
RATE_FUNCTIONS = {"rate", "irate", "increase", "resets"}  # only meaningful on counters
GAUGE_FUNCTIONS = {"deriv", "delta", "idelta", "predict_linear"}  # only meaningful on gauges


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERT_RULES.read_text())["groups"] for rule in group["rules"]]


def test_rule_file_matches_the_prometheus_rule_format() -> None:
    jsonschema.validate(yaml.safe_load(ALERT_RULES.read_text()), RULE_FILE_SCHEMA)


def test_the_schema_rejects_a_misspelt_key() -> None:
    data = yaml.safe_load(ALERT_RULES.read_text())
    data["groups"][0]["rules"][0]["fro"] = data["groups"][0]["rules"][0].pop("for")
    with pytest.raises(jsonschema.ValidationError, match="fro"):
        jsonschema.validate(data, RULE_FILE_SCHEMA)


def test_every_required_alert_exists_with_severity_and_text() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    assert REQUIRED_ALERTS <= set(by_name), f"missing alerts: {REQUIRED_ALERTS - set(by_name)}"
    for name, rule in by_name.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_every_expression_parses_as_promql() -> None:
    for rule in rules():
        promql_parser.parse(rule["expr"])  # raises ValueError naming the problem


def test_the_parser_rejects_broken_promql() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse('rate(ddflow_epochs_total{job="ddflow"}[5m)')


def test_rules_select_only_metrics_the_daemon_exports(daemon_scrape: dict[str, str]) -> None:
    used = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    unknown = used - set(daemon_scrape) - PROMETHEUS_SYNTHETIC
    assert not unknown, f"alert rules use metrics the daemon does not export: {sorted(unknown)}"
    # and they cover what the alerts are about
    assert {"ddflow_output_frontier_timestamp_seconds", "ddflow_consumer_lag_messages",
            "ddflow_dead_letters_total", "ddflow_worker_loop_timestamp_seconds", "up"} <= used


def test_functions_fit_the_metric_types(daemon_scrape: dict[str, str]) -> None:
    for rule in rules():
        for function, metric in range_functions(rule["expr"]):
            kind = daemon_scrape.get(metric, "synthetic")
            if function in RATE_FUNCTIONS:
                assert kind in {"counter", "histogram"}, f"{rule['alert']}: {function}() of {kind} {metric}"
            if function in GAUGE_FUNCTIONS:
                assert kind == "gauge", f"{rule['alert']}: {function}() of {kind} {metric}"


def test_promtool_checks_the_rules(promtool: str) -> None:
    result = run([promtool, "check", "rules", str(ALERT_RULES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    result = run([promtool, "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(("original", "broken", "alert"), [
    ('expr: up{job="ddflow"} == 0\n        for: 2m', 'expr: up{job="ddflow"} == 0\n        for: 30m', "DdflowDaemonDown"),
    ('time() - ddflow_worker_loop_timestamp_seconds{job="ddflow"} > 300',
     'time() - ddflow_worker_loop_timestamp_seconds{job="ddflow"} > 3000', "DdflowWorkerLoopStalled"),
    ('ddflow_worker_loop_timestamp_seconds{job="ddflow"} > 0\n', 'ddflow_worker_loop_timestamp_seconds{job="ddflow"} >= 0\n',
     "DdflowWorkerLoopStalled"),  # a loop that has not started is not a stalled one
])
def test_promtool_unit_tests_catch_a_broken_rule(promtool: str, tmp_path: Path, original: str, broken: str,
                                                 alert: str) -> None:
    """The unit tests are not vacuous: an alert that waits too long, or fires on a daemon still
    starting, fails them."""
    text = ALERT_RULES.read_text()
    assert text.count(original) == 1
    (tmp_path / ALERT_RULES.name).write_text(text.replace(original, broken))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    result = run([promtool, "test", "rules", ALERT_TESTS.name], cwd=tmp_path)
    assert result.returncode != 0
    assert alert in result.stdout + result.stderr


def test_prometheus_operator_rule_carries_the_same_groups() -> None:
    operator_rule = yaml.safe_load((KUBERNETES / "components" / "prometheus-operator" / "prometheusrule.yaml").read_text())
    assert operator_rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"]
