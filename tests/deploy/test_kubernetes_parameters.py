"""deploy/kubernetes applies on a plain cluster and takes its parameters: the example overlay
without the optional Prometheus Operator component renders core objects only, each valid; the
storage class, volume size and image come from the overlay's parameters; and a user's dataflow
module ships in the config's ConfigMap, or in an image built FROM ddflow's (Dockerfile.dataflow)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import utils as kv

from deploy_support import CONTAINER, KUBERNETES, by_kind, kustomize, run, tool

OVERLAY = Path("overlays") / "example"
COMPONENT = "  - ../../components/prometheus-operator\n"
SECRETS = {"KAFKA_SASL_USERNAME": "ddflow", "KAFKA_SASL_PASSWORD": "not-a-real-password"}
DATAFLOW_DOCKERFILE = CONTAINER / "Dockerfile.dataflow"


def copy_tree(tmp_path: Path) -> Path:
    """deploy/kubernetes copied, so that an overlay can be edited and rendered with its relative paths."""
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    return tmp_path / "kubernetes"


def check_config(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in SECRETS and k != "PYTHONPATH"} | env
    return subprocess.run([str(Path(sys.executable).parent / "ddflow"), "check-config", str(path)],
                          capture_output=True, text=True, timeout=120, env=environ)


def test_the_overlay_without_the_operator_component_renders_core_objects_only(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    kustomization = tree / OVERLAY / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count(COMPONENT) == 1, "the overlay names the component on one line"
    kustomization.write_text(text.replace("components:\n" + COMPONENT, ""))
    docs = kustomize(tree / OVERLAY)
    objects = by_kind(docs)
    assert set(objects) == {"ServiceAccount", "ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}
    for doc in docs:
        kv.validate(doc, kv.latest_version(), strict=True)
    # the rest of the overlay still applies: namespace, image, workers, parameters
    assert {doc["metadata"]["namespace"] for doc in docs} == {"analytics"}
    assert objects["StatefulSet"]["spec"]["replicas"] == 2


def test_the_parameters_reach_the_objects_and_are_not_applied(tmp_path: Path, overlay_docs: list[dict]) -> None:
    parameters = yaml.safe_load((KUBERNETES / OVERLAY / "parameters.yaml").read_text())
    assert parameters["metadata"]["annotations"]["config.kubernetes.io/local-config"] == "true"
    assert "ddflow-parameters" not in {d["metadata"]["name"] for d in overlay_docs}

    def claim(docs: list[dict]) -> dict:
        (first, *_) = by_kind(docs)["StatefulSet"]["spec"]["volumeClaimTemplates"]
        assert first["metadata"]["name"] == "checkpoints"  # the replacements address it by position
        return first["spec"]

    assert "storageClassName" not in claim(kustomize(KUBERNETES / "base")), "the base takes the default class"
    spec = claim(overlay_docs)
    assert (spec["storageClassName"], spec["resources"]["requests"]["storage"]) == (
        parameters["data"]["storageClassName"], parameters["data"]["checkpointStorage"])
    tree = copy_tree(tmp_path)  # another value each, and another image
    edited = tree / OVERLAY / "parameters.yaml"
    edited.write_text(edited.read_text().replace(f"storageClassName: {parameters['data']['storageClassName']}",
                                                 "storageClassName: fast-ssd")
                      .replace(f"checkpointStorage: {parameters['data']['checkpointStorage']}", "checkpointStorage: 7Gi"))
    kustomization = yaml.safe_load((tree / OVERLAY / "kustomization.yaml").read_text())
    kustomization["images"] = [{"name": "ddflow", "newName": "registry.other/ddflow", "newTag": "9.9"}]
    (tree / OVERLAY / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = kustomize(tree / OVERLAY)
    spec = claim(docs)
    assert (spec["storageClassName"], spec["resources"]["requests"]["storage"]) == ("fast-ssd", "7Gi")
    pod = by_kind(docs)["StatefulSet"]["spec"]["template"]["spec"]
    assert {c["image"] for c in pod["containers"] + pod["initContainers"]} == {"registry.other/ddflow:9.9"}


def test_the_dataflow_module_ships_in_the_config_map(tmp_path: Path, overlay_docs: list[dict],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """What the pod sees at /etc/ddflow (the ConfigMap's files) passes check-config there: the
    config's [dataflow] path puts that directory on the import path, and the module is among them."""
    objects = by_kind(overlay_docs)
    (c,) = objects["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    etc = tmp_path / mount["mountPath"].lstrip("/")
    etc.mkdir(parents=True)
    for name, content in objects["ConfigMap"]["data"].items():
        (etc / name).write_text(content)
    dataflow = tomllib.loads((etc / "ddflow.toml").read_text())["dataflow"]
    module = dataflow["function"].split(":")[0]
    assert dataflow["path"] == ["."] and f"{module}.py" in objects["ConfigMap"]["data"]
    done = check_config(etc / "ddflow.toml", SECRETS)
    assert done.returncode == 0 and "dataflow builds outputs ['page_views']" in done.stdout, done.stdout + done.stderr
    (etc / f"{module}.py").unlink()  # the check can fail: without the module the import is refused
    from ddflow.config import ConfigError, load_config, resolve_dataflow

    monkeypatch.setattr(sys, "path", list(sys.path))  # resolve_dataflow adds the config's path
    with pytest.raises(ConfigError, match="dataflow.function"):
        resolve_dataflow(load_config(etc / "ddflow.toml"))
    assert module not in sys.modules


def test_the_dataflow_image_lints_clean_and_puts_the_module_on_the_path(tmp_path: Path,
                                                                        overlay_docs: list[dict]) -> None:
    result = run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DATAFLOW_DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [ln for ln in DATAFLOW_DOCKERFILE.read_text().splitlines() if ln and not ln.startswith("#")]
    instructions = [(ln.split(" ", 1)[0], ln.split(" ", 1)[1]) for ln in lines]
    assert [op for op, _ in instructions] == ["ARG", "FROM", "COPY", "ENV"]
    default_image = instructions[0][1].split("=", 1)[1]
    (image,) = {c["image"] for c in by_kind(overlay_docs)["StatefulSet"]["spec"]["template"]["spec"]["containers"]}
    assert instructions[1][1] == "${DDFLOW_IMAGE}" and default_image == image, "FROM the image the overlay runs"
    *sources, dest = shlex.split(instructions[2][1])
    assert instructions[3][1] == f"PYTHONPATH={dest.rstrip('/')}"
    # the build command in the comment names the context the sources are in
    comment = " ".join(ln.strip("# \\") for ln in DATAFLOW_DOCKERFILE.read_text().splitlines()
                       if ln.startswith("#") and ("docker build" in ln or ln.startswith("#     ")))
    context = Path(shlex.split(comment)[-1])
    assert all((KUBERNETES.parents[1] / context / s).is_file() for s in sources), (context, sources)
    # a config naming the module without a path, with the image's PYTHONPATH (the copied files)
    image_path = tmp_path / dest.strip("/")
    image_path.mkdir(parents=True)
    for s in sources:
        shutil.copy(KUBERNETES.parents[1] / context / s, image_path)
    config = (KUBERNETES / OVERLAY / "ddflow.toml").read_text().replace('path = ["."]\n', "")
    assert "\npath =" not in config
    (tmp_path / "ddflow.toml").write_text(config)
    done = check_config(tmp_path / "ddflow.toml", SECRETS | {"PYTHONPATH": str(image_path)})
    assert done.returncode == 0, done.stdout + done.stderr
