"""Shared helpers of the deploy/ validation tests: where things are, the validator tools, strict
schemas for the Prometheus rule format and the Prometheus Operator objects, a systemd unit
reader, the metric names a PromQL expression or a Prometheus scrape contains, and a handle on a
live ``ddflow run``.

The validators come from the ``test`` extra (kubectl with its built-in kustomize, hadolint,
kubernetes-validate, promql-parser); a missing one means the extra is not installed, which fails
the test with the command that fixes it rather than skipping it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SYSTEMD = DEPLOY / "systemd"
KUBERNETES = DEPLOY / "kubernetes"
CONTAINER = DEPLOY / "container"
PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"

ALERT_RULES = PROMETHEUS / "ddflow-alerts.yml"
ALERT_TESTS = PROMETHEUS / "ddflow-alerts.test.yml"
DASHBOARD = GRAFANA / "ddflow-dashboard.json"

# Series that Prometheus itself makes for every target (not exported by ddflow).
PROMETHEUS_SYNTHETIC = {"up"}


# The Prometheus rule-file format (prometheus/docs "Alerting rules"; this file holds alerting
# rules only), strict: an unknown or misspelt key is an error, as it is for promtool.
_DURATION = r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
RULE_FILE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groups"],
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "rules"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "limit": {"type": "integer", "minimum": 0},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["alert", "expr"],
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": _DURATION},
                                "keep_firing_for": {"type": "string", "pattern": _DURATION},
                                "labels": _LABELS,
                                "annotations": _LABELS,
                            },
                        },
                    },
                },
            },
        }
    },
}


# Prometheus Operator CRDs (monitoring.coreos.com/v1), which kubernetes-validate has no schema
# for: every property name their openAPIV3Schema allows at the levels the manifests use, so a
# misspelt key fails, and the CRD's own patterns for the values used.
_CRD_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_OBJECT_META = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}, "namespace": {"type": "string"},
    "labels": _LABELS, "annotations": _LABELS}, "additionalProperties": False}
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _LABELS, "matchExpressions": {"type": "array"}}}
_ENDPOINT_KEYS = ("authorization basicAuth bearerTokenFile bearerTokenSecret enableHttp2 filterRunning "
                  "followRedirects honorLabels honorTimestamps interval metricRelabelings oauth2 params path port "
                  "proxyUrl relabelings scheme scrapeTimeout targetPort tlsConfig trackTimestampsStaleness").split()
_SERVICE_MONITOR_SPEC_KEYS = ("attachMetadata bodySizeLimit endpoints fallbackScrapeProtocol jobLabel "
                              "keepDroppedTargets labelLimit labelNameLengthLimit labelValueLengthLimit "
                              "namespaceSelector nativeHistogramBucketLimit nativeHistogramMinBucketFactor "
                              "podTargetLabels sampleLimit scrapeClass scrapeClassicHistograms scrapeProtocols "
                              "selector selectorMechanism targetLabels targetLimit").split()
SERVICE_MONITOR_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object", "required": ["selector"], "additionalProperties": False,
            "properties": {key: {} for key in _SERVICE_MONITOR_SPEC_KEYS} | {
                "jobLabel": {"type": "string"},
                "selector": _LABEL_SELECTOR,
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {key: {} for key in _ENDPOINT_KEYS} | {
                        "port": {"type": "string"}, "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                        "interval": {"type": "string", "pattern": _CRD_DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": _CRD_DURATION},
                    }}},
            },
        },
    },
}
_OPERATOR_GROUP = RULE_FILE_SCHEMA["properties"]["groups"]["items"]
PROMETHEUS_RULE_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "metadata": _OBJECT_META,
        "spec": {"type": "object", "additionalProperties": False, "properties": {"groups": {
            "type": "array", "items": _OPERATOR_GROUP | {"properties": _OPERATOR_GROUP["properties"] | {
                "partial_response_strategy": {"type": "string"}, "query_offset": {"type": "string"},
                "labels": _LABELS}}}}},
    },
}


def tool(name: str) -> str:
    """Path of a validator installed by the test extra (the venv's bin directory first)."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run `.venv/bin/pip install -e '.[test]'` (the test extra ships it)")
    return found


def run(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def kustomize(directory: Path) -> list[dict]:
    """Render a kustomization with kubectl's built-in kustomize; the documents, in order."""
    result = run([tool("kubectl"), "kustomize", str(directory)])
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def by_kind(docs: Iterable[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for doc in docs:
        assert doc["kind"] not in out, f"two {doc['kind']} objects rendered; the tests expect one of each"
        out[doc["kind"]] = doc
    return out


# -- systemd units ---------------------------------------------------------------------------------

def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) in file order: repeated keys stay repeated, as systemd reads them."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"not a 'Key=Value' line inside a section: {raw!r}"
        entries.append((section, key.strip(), value.strip()))
    return entries


def unit(name: str) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for section, key, value in parse_unit((SYSTEMD / name).read_text()):
        out.setdefault((section, key), []).append(value)
    return out


def last(entries: dict[tuple[str, str], list[str]], section: str, key: str) -> str:
    assert (section, key) in entries, f"[{section}] {key}= is missing"
    return entries[(section, key)][-1]


# -- PromQL ----------------------------------------------------------------------------------------

_GRAFANA_RANGES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_GRAFANA_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def grafana_to_promql(expr: str) -> str:
    """A dashboard query as plain PromQL: range variables become durations, others a regex."""
    for name, duration in _GRAFANA_RANGES.items():
        expr = expr.replace(name, duration)
    return _GRAFANA_VARIABLE.sub(".*", expr)


def grafana_variables(expr: str) -> set[str]:
    return {m for m in _GRAFANA_VARIABLE.findall(expr) if f"${m}" not in _GRAFANA_RANGES and not m.startswith("__")}


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector of a PromQL expression (raises ValueError if it does not parse)."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects; every selector must name its metric plainly."""
    names = set()
    for selector in selectors(expr):
        assert selector.name, f"selector without a metric name in {expr!r}: name every metric explicitly"
        names.add(selector.name)
    return names


def range_functions(expr: str) -> list[tuple[str, str]]:
    """(function, metric) for every function applied directly to a range selector."""
    out: list[tuple[str, str]] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.Call):
            for arg in node.args:
                if isinstance(arg, promql_parser.MatrixSelector):
                    out.append((node.func.name, arg.vector_selector.name))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return out


# -- a live daemon ---------------------------------------------------------------------------------

# The edges the live daemon is fed: one per millisecond from 2023-11-14 22:13:20 UTC, then a
# progress marker 100 ms later that makes all of them final.
EDGE_TIMES = [1_700_000_000_000_000_000 + i * 1_000_000 for i in range(20)]
PROGRESS = EDGE_TIMES[-1] + 100_000_000


@dataclass
class LiveDaemon:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    container: dict

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:  # not listening yet
            return 0, str(exc)

    def wait_for(self, path: str, *, limit: float = 120) -> str:
        """Poll ``path`` until it answers 200 (bounded; fails with the daemon's log otherwise)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"ddflow run exited with {self.process.returncode}:\n{self.log.read_text()[-4000:]}")
            status, body = self.get(path)
            if status == 200:
                return body
            time.sleep(0.2)
        pytest.fail(f"{path} did not answer 200 within {limit} s:\n{self.log.read_text()[-4000:]}")


# -- scrapes ---------------------------------------------------------------------------------------

def exposed_samples(text: str) -> dict[str, str]:
    """Sample name -> metric type of every series in a Prometheus text exposition
    (a histogram's samples are its ``_bucket``, ``_sum`` and ``_count`` series). A family exposed
    without series yet (the exchange families of a worker alone: it has no peers) counts with the
    sample name its series will have (a counter's ``_total``)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = family.type
        if not family.samples and family.type in ("counter", "gauge"):
            out[family.name + ("_total" if family.type == "counter" else "")] = family.type
    return out
