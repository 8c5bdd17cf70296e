"""deploy/kubernetes: the base (core objects only) and the example overlay (with the optional
Prometheus Operator component) render with kustomize (kubectl's), every object validates against
the Kubernetes schemas (kubernetes-validate, strict), the Prometheus Operator objects against their
CRD fields, and the objects agree with each other, with the worker config they mount, with the
daemon's CLI and with the container image."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path, PurePosixPath

import jsonschema
import pytest
from kubernetes_validate import utils as kv

from deploy_support import (CONTAINER, KUBERNETES, PROMETHEUS_RULE_SCHEMA, REPO, SERVICE_MONITOR_SCHEMA, by_kind,
                            kustomize)

CORE_KINDS = {"ServiceAccount", "ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # the optional prometheus-operator component
CRD_SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR_SCHEMA, "PrometheusRule": PROMETHEUS_RULE_SCHEMA}
# The oldest Kubernetes the schemas bundled with kubernetes-validate describe, and the newest.
K8S_VERSIONS = sorted({kv.all_versions()[0], kv.latest_version()})


@pytest.fixture(scope="module", params=["base", "overlays/example"])
def rendered(request: pytest.FixtureRequest, base_docs: list[dict], overlay_docs: list[dict]) -> dict[str, dict]:
    return by_kind(base_docs if request.param == "base" else overlay_docs)


def container(objects: dict[str, dict]) -> dict:
    (only,) = objects["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    return only


def pod_labels(objects: dict[str, dict]) -> dict[str, str]:
    return objects["StatefulSet"]["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def worker_config(objects: dict[str, dict]) -> tuple[dict, PurePosixPath]:
    """The TOML the workers run, and the path it has inside the container."""
    from ddflow.daemon.cli.parser import build_parser

    args = build_parser(environ={}).parse_args(container(objects)["args"])
    assert args.command == "run"
    path = PurePosixPath(args.config)
    mount = next(m for m in container(objects)["volumeMounts"] if m["name"] == "config")
    assert path.parent == PurePosixPath(mount["mountPath"])
    data = objects["ConfigMap"]["data"]
    assert path.name in data, f"{path} is not a key of the mounted ConfigMap ({sorted(data)})"
    return tomllib.loads(data[path.name]), path


# -- rendering and schemas -------------------------------------------------------------------------

def test_base_renders_core_objects_only(base_docs: list[dict]) -> None:
    """The base applies on a cluster without the Prometheus Operator's CRDs."""
    assert set(by_kind(base_docs)) == CORE_KINDS
    assert {doc["apiVersion"].split("/")[0] for doc in base_docs} <= {"v1", "apps", "policy"}


def test_overlay_adds_the_operator_component(overlay_docs: list[dict]) -> None:
    assert set(by_kind(overlay_docs)) == CORE_KINDS | OPERATOR_KINDS


def test_overlay_changes_what_it_says(overlay_docs: list[dict]) -> None:
    objects = by_kind(overlay_docs)
    assert {doc["metadata"]["namespace"] for doc in overlay_docs} == {"analytics"}
    assert container(objects)["image"].startswith("registry.example.com/analytics/ddflow:")
    assert objects["PrometheusRule"]["metadata"]["labels"]["release"] == "prometheus"
    assert objects["StatefulSet"]["spec"]["replicas"] == 2  # several workers (the config's workers.count)


def test_one_pod_per_worker_each_knowing_its_index(rendered: dict[str, dict]) -> None:
    raw, _ = worker_config(rendered)
    count = raw.get("workers", {}).get("count", 1)
    assert rendered["StatefulSet"]["spec"]["replicas"] == count, (
        "workers.count workers share the dataflow: fewer pods leave keys and partitions unowned "
        "(the others wait for them), more would compute and publish results twice")
    assert "index" not in raw.get("workers", {}), "one config for every pod: the index comes from the pod"
    env = {e["name"]: e for e in container(rendered)["env"]}
    path = env["DDFLOW_WORKER_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert path == "metadata.labels['apps.kubernetes.io/pod-index']"
    from ddflow.config import parse_config
    from ddflow.daemon.cluster.identity import worker_identity

    config = parse_config(rendered["ConfigMap"]["data"]["ddflow.toml"], source=Path("ddflow.toml"))
    name = rendered["StatefulSet"]["metadata"]["name"]
    for i in range(count):  # the label's value, else the pod's host name
        assert worker_identity(config, environ={"DDFLOW_WORKER_INDEX": str(i)}) == (i, count)
        assert worker_identity(config, environ={"DDFLOW_WORKER_INDEX": ""}, hostname=f"{name}-{i}") == (i, count)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_validate_against_the_kubernetes_schemas(rendered: dict[str, dict], version: str) -> None:
    for kind, doc in rendered.items():
        if kind not in CRD_SCHEMAS:
            kv.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_strict_validation_rejects_a_misspelt_field(base_docs: list[dict]) -> None:
    statefulset = copy.deepcopy(by_kind(base_docs)["StatefulSet"])
    statefulset["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(statefulset, kv.latest_version(), strict=True)


def test_operator_objects_validate_against_their_crd_fields(overlay_docs: list[dict]) -> None:
    objects = by_kind(overlay_docs)
    for kind, schema in CRD_SCHEMAS.items():
        jsonschema.validate(objects[kind], schema)


def test_crd_schema_rejects_a_misspelt_field(overlay_docs: list[dict]) -> None:
    monitor = copy.deepcopy(by_kind(overlay_docs)["ServiceMonitor"])
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)


# -- the objects agree with each other ---------------------------------------------------------------

def test_selectors_and_ports_line_up(rendered: dict[str, dict], overlay_docs: list[dict]) -> None:
    sts, service, pdb = (rendered[k] for k in ("StatefulSet", "Service", "PodDisruptionBudget"))
    monitor = by_kind(overlay_docs)["ServiceMonitor"]  # the component's, checked against both
    labels = pod_labels(rendered)
    assert selects(sts["spec"]["selector"]["matchLabels"], labels)
    assert selects(service["spec"]["selector"], labels)
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"  # headless: a stable DNS name per worker
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    # the job label Prometheus gets is "ddflow", which the alert rules select
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "ddflow"
    container_ports = {p["name"]: p["containerPort"] for p in container(rendered)["ports"]}
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in service_ports
        assert endpoint["path"] == "/metrics"
        assert service_ports[endpoint["port"]]["targetPort"] in container_ports


def test_probes_hit_the_daemon_health_endpoints(rendered: dict[str, dict]) -> None:
    c = container(rendered)
    ports = {p["name"] for p in c["ports"]}
    expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        assert c[probe]["httpGet"]["path"] == path
        assert c[probe]["httpGet"]["port"] in ports


def test_volumes_exist_and_config_map_is_the_generated_one(rendered: dict[str, dict]) -> None:
    spec = rendered["StatefulSet"]["spec"]
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    for mount in container(rendered)["volumeMounts"]:
        assert mount["name"] in volumes or mount["name"] in claims, mount
    assert volumes["config"]["configMap"]["name"] == rendered["ConfigMap"]["metadata"]["name"]
    assert "checkpoints" in claims


# -- ... with the worker config, the CLI and the image -------------------------------------------------

def test_mounted_config_is_valid_and_matches_the_pod(rendered: dict[str, dict], tmp_path: Path) -> None:
    from ddflow.config import parse_address, parse_config

    raw, path = worker_config(rendered)
    config = parse_config(rendered["ConfigMap"]["data"][path.name], source=tmp_path / path.name)
    c = container(rendered)
    metrics_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert config.metrics.port == metrics_port
    # the pod serves on its own IP: DDFLOW_METRICS_ADDRESS = "$(POD_IP):port", POD_IP defined before it
    env = [e["name"] for e in c["env"]]
    by_name = {e["name"]: e for e in c["env"]}
    assert by_name["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env.index("POD_IP") < env.index("DDFLOW_METRICS_ADDRESS")
    assert by_name["DDFLOW_METRICS_ADDRESS"]["value"] == f"$(POD_IP):{metrics_port}"
    from ddflow.daemon.cli.parser import build_parser

    for pod_ip, host in (("10.244.1.7", "10.244.1.7"), ("fd00:10:244::7", "fd00:10:244::7")):
        args = build_parser(environ={"DDFLOW_METRICS_ADDRESS": f"{pod_ip}:{metrics_port}"}).parse_args(c["args"])
        assert parse_address(args.metrics_address) == (host, metrics_port)
    if config.workers.count > 1:  # the mesh: each pod by its stable name, on the port the pod and Service open
        mesh_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "mesh")
        service = rendered["Service"]
        assert next(p for p in service["spec"]["ports"] if p["name"] == "mesh")["targetPort"] == "mesh"
        names = (rendered["StatefulSet"]["metadata"]["name"], service["metadata"]["name"])
        assert config.workers.addresses == tuple(f"tcp://{names[0]}-{i}.{names[1]}:{mesh_port}"
                                                 for i in range(config.workers.count))
    mounts = {m["name"]: PurePosixPath(m["mountPath"]) for m in c["volumeMounts"]}
    location = PurePosixPath(raw["checkpoint"]["location"])
    assert location.is_absolute() and mounts["checkpoints"] in location.parents, (
        f"checkpoints at {location} would not be on the per-worker volume {mounts['checkpoints']}")


def test_every_secret_the_config_reads_comes_from_the_kafka_secret(rendered: dict[str, dict]) -> None:
    raw, _ = worker_config(rendered)
    env = {e["name"]: e for e in container(rendered).get("env", [])}
    for option, ref in raw.get("kafka", {}).get("secrets", {}).items():
        assert "env" in ref, f"kafka.secrets.{option} must come from the environment in Kubernetes"
        source = env[ref["env"]]["valueFrom"]["secretKeyRef"]
        assert source["name"] == "ddflow-kafka"
        assert source.get("optional") is False, f"{ref['env']}: a secret the config needs must not be optional"
    for var in env.values():  # and no credential is written into the manifest
        assert "value" not in var or "PASSWORD" not in var["name"]


def test_pod_runs_unprivileged_as_the_image_user(rendered: dict[str, dict]) -> None:
    pod = rendered["StatefulSet"]["spec"]["template"]["spec"]
    c = container(rendered)
    image_user = next(line.split()[1] for line in (CONTAINER / "Dockerfile").read_text().splitlines()
                      if line.startswith("USER "))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == image_user
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    assert rendered["ServiceAccount"]["automountServiceAccountToken"] is False
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
    # SIGTERM drains the epoch: give it the same budget as the systemd unit's TimeoutStopSec
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_workers_are_restarted_for_as_long_as_an_outage_lasts(rendered: dict[str, dict]) -> None:
    """Kubernetes restarts a failed container with a back-off capped at 5 minutes and never stops
    trying: nothing here may bound the restarts (a deadline, a Job's backoffLimit)."""
    pod = rendered["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always" and "activeDeadlineSeconds" not in pod
    assert not {"Job", "CronJob"} & set(rendered)
    probe = container(rendered)["livenessProbe"]  # a stalled loop is restarted too, not left stuck
    assert probe["httpGet"]["path"] == "/healthz"


def test_image_tag_is_the_project_version(rendered: dict[str, dict]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert container(rendered)["image"].rsplit(":", 1)[1] == version
