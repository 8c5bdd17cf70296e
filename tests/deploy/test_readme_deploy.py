"""The deployment guide (docs/deployment.md) cannot go stale: the files it installs exist, and its
commands agree with the units, the manifests and the Dockerfile they refer to."""

from __future__ import annotations

import re
import shlex

import yaml

from deploy_support import CONTAINER, KUBERNETES, REPO, SYSTEMD, by_kind
from support.docs import example, text

def section() -> str:
    return text("deployment.md")


def commands(block: str) -> list[list[str]]:
    """Every command of an example's bash block, split at && and without sudo or comments."""
    out = []
    for line in block.splitlines():
        for part in line.split("#", 1)[0].split("&&"):
            argv = shlex.split(part)
            if argv and argv[0] == "sudo":
                argv = argv[1:]
            if argv:
                out.append(argv)
    return out


def test_every_deploy_path_mentioned_exists() -> None:
    paths = set(re.findall(r"(deploy/[\w@./-]+\w)", section()))
    assert paths, "the guide names no deploy/ file"
    for path in paths:
        assert (REPO / path).exists(), f"docs/deployment.md mentions {path}, which does not exist"


def test_systemd_commands_match_the_units() -> None:
    argvs = commands(example("systemd", "bash"))
    venv = next(a[-1] for a in argvs if a[:3] == ["python3", "-m", "venv"])
    exec_start = next(ln for ln in (SYSTEMD / "ddflow.service").read_text().splitlines()
                      if ln.startswith("ExecStart="))
    assert exec_start.split("=", 1)[1].split()[0] == f"{venv}/bin/ddflow"
    installed = {a[-1]: a[-2] for a in argvs if a[0] == "install"}
    assert installed["/etc/ddflow/ddflow.toml"] == "deploy/systemd/ddflow.toml"
    assert installed["/etc/ddflow/ddflow.env"] == "deploy/systemd/ddflow.env.example"
    assert "EnvironmentFile=-/etc/ddflow/ddflow.env" in (SYSTEMD / "ddflow.service").read_text()
    assert ["systemctl", "enable", "--now", "ddflow"] in argvs


def test_kubernetes_commands_match_the_overlay(overlay_docs: list[dict]) -> None:
    argvs = commands(example("kubernetes", "bash"))
    objects = by_kind(overlay_docs)
    (container,) = objects["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    build = next(a for a in argvs if a[:2] == ["docker", "build"])
    assert build[build.index("-f") + 1] == str((CONTAINER / "Dockerfile").relative_to(REPO))
    assert build[build.index("-t") + 1] == container["image"]
    namespace = objects["StatefulSet"]["metadata"]["namespace"]
    assert ["kubectl", "create", "namespace", namespace] in argvs
    secret = next(a for a in argvs if a[:5] == ["kubectl", "-n", namespace, "create", "secret"])
    keys = {re.match(r"--from-(?:literal|file)=(\w+)=", a).group(1) for a in secret if a.startswith("--from-")}
    refs = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {(secret[6], key) for key in keys}
    apply = next(a for a in argvs if a[:2] == ["kubectl", "apply"])
    assert (REPO / apply[-1] / "kustomization.yaml").is_file()
    assert yaml.safe_load((REPO / apply[-1] / "kustomization.yaml").read_text())["namespace"] == namespace
    assert (KUBERNETES / "overlays" / "example") == REPO / apply[-1]


def test_worker_template_commands_match_the_unit() -> None:
    """The several-workers example installs the unit, the config it runs and one env file per worker
    with its own metrics port, and enables the instances the config's count asks for."""
    argvs = commands(example("systemd-workers", "bash"))
    unit = (SYSTEMD / "ddflow-worker@.service").read_text()
    installed = {a[-1]: a[-2] for a in argvs if a[0] == "install"}
    assert installed["/etc/systemd/system/"] == "deploy/systemd/ddflow-worker@.service"
    config = next(ln.split("--config ", 1)[1].split()[0] for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert installed[config] == "deploy/systemd/workers.toml"
    assert "EnvironmentFile=/etc/ddflow/worker-%i.env" in unit
    env = (SYSTEMD / "worker.env.example").read_text()
    assert re.search(r"^DDFLOW_METRICS_ADDRESS=\S+:9108$", env, flags=re.M)
    assert 'sed "s/:9108/:$((9108 + i))/" deploy/systemd/worker.env.example' in example("systemd-workers")
    count = re.search(r"^count = (\d+)$", (SYSTEMD / "workers.toml").read_text(), flags=re.M).group(1)
    enable = next(a for a in argvs if a[:3] == ["systemctl", "enable", "--now"])
    assert enable[3:] == [f"ddflow-worker@{i}" for i in range(int(count))]


def test_dataflow_image_command_matches_its_dockerfile(overlay_docs: list[dict]) -> None:
    """The guide's build of an image FROM ddflow's names the Dockerfile, a context that holds what it
    copies, and the image the overlay runs as the base; it is the build the Dockerfile's comment shows."""
    (argv,) = commands(example("dataflow-image", "bash"))
    dockerfile = REPO / argv[argv.index("-f") + 1]
    assert dockerfile == CONTAINER / "Dockerfile.dataflow"
    text = dockerfile.read_text()
    copy = next(ln for ln in text.splitlines() if ln.startswith("COPY "))
    context = REPO / argv[-1]
    assert all((context / source).is_file() for source in shlex.split(copy)[1:-1])
    (container,) = by_kind(overlay_docs)["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert argv[argv.index("--build-arg") + 1] == f"DDFLOW_IMAGE={container['image']}"
    shown = " ".join(ln.lstrip("#").strip().rstrip("\\").strip() for ln in text.splitlines()
                     if ln.startswith("#   docker build") or ln.startswith("#     "))
    assert shlex.split(shown) == argv


def test_backfill_target_named_in_the_guide_exists() -> None:
    assert "--target backfill" in section()
    assert re.search(r"^FROM \S+ AS backfill$", (CONTAINER / "Dockerfile").read_text(), flags=re.M)
