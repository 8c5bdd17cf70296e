"""deploy/container: the Dockerfile lints clean with hadolint (no engine builds images here) and is
consistent with pyproject.toml: the Python it builds on, what it copies, the entry point it runs,
the user, port and stop signal the other deploy files assume."""

from __future__ import annotations

import fnmatch
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from deploy_support import CONTAINER, KUBERNETES, REPO, run, tool

DOCKERFILE = CONTAINER / "Dockerfile"
DOCKERIGNORE = CONTAINER / "Dockerfile.dockerignore"  # BuildKit's per-Dockerfile ignore file
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [args for instruction, args in self.instructions if instruction == op]

    def one(self, op: str) -> str:
        values = self.all(op)
        assert values, f"stage {self.name} has no {op}"
        return values[-1]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs and the stages, with line continuations joined and comments dropped."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = rest.split()
            assert len(words) == 3 and words[1].upper() == "AS", f"unnamed stage: {line}"
            stages.append(Stage(words[2], words[0]))
        elif not stages and op == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            stages[-1].instructions.append((op, rest.strip()))
    return args, stages


def stages() -> dict[str, Stage]:
    return {stage.name: stage for stage in parse_dockerfile(DOCKERFILE.read_text())[1]}


def hadolint(path: Path) -> tuple[int, str]:
    result = run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(path)])
    return result.returncode, result.stdout + result.stderr


def test_dockerfile_lints_clean() -> None:
    code, output = hadolint(DOCKERFILE)
    assert code == 0, output


def test_hadolint_reports_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install curl\nADD . /app\n")
    code, output = hadolint(bad)
    assert code != 0
    assert {"DL3007", "DL3008", "DL3015", "DL3020"} <= set(output.split())


def test_python_base_satisfies_requires_python() -> None:
    args, _ = parse_dockerfile(DOCKERFILE.read_text())
    version = args["PYTHON_VERSION"]
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"])
    for stage in stages().values():
        if not stage.base.startswith(("build", "base")):  # stages built on earlier stages
            assert stage.base == "python:${PYTHON_VERSION}-slim-bookworm", stage.name


def test_build_copies_exactly_what_the_project_packages() -> None:
    build = stages()["build"]
    copied = set()
    for args in build.all("COPY"):
        *sources, _dest = shlex.split(args)
        copied |= {s.rstrip("/") for s in sources}
    package_dirs = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    assert copied == {"pyproject.toml", PYPROJECT["project"]["readme"]} | package_dirs
    # package data (the example configs) lives inside a copied directory
    for package, globs in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        directory = PYPROJECT["tool"]["setuptools"]["package-dir"][package]
        for pattern in globs:
            assert list((REPO / directory).glob(pattern)), f"{directory}/{pattern} matches nothing"
    assert "pip install ." in build.one("RUN")


def test_the_image_ships_its_modules_byte_compiled() -> None:
    """The runtime writes no bytecode, so every install byte-compiles (no ``--no-compile``): a module
    without its .pyc would be compiled from source at every start."""
    s = stages()
    assert "PYTHONDONTWRITEBYTECODE=1" in s["base"].all("ENV")[0]
    for name in ("build", "build-backfill"):
        assert "pip install" in s[name].one("RUN") and "--no-compile" not in s[name].one("RUN"), name


def test_build_context_keeps_what_the_build_copies() -> None:
    """The ignore file's allow-list is what the build copies; everything else stays out."""
    rules = [ln for ln in DOCKERIGNORE.read_text().splitlines() if ln and not ln.startswith("#")]
    assert rules[0] == "*", "start from nothing and allow what the build needs"

    def sent(path: str) -> bool:  # Docker's rule: the last matching pattern wins
        keep = True
        for rule in rules:
            negated = rule.startswith("!")
            pattern = rule[1:] if negated else rule
            if fnmatch.fnmatch(path, pattern.rstrip("/")) or fnmatch.fnmatch(path, pattern.rstrip("/") + "/*") \
                    or (pattern.startswith("**/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern[3:])):
                keep = negated
        return keep

    package_dirs = PYPROJECT["tool"]["setuptools"]["package-dir"].values()
    for directory in package_dirs:
        files = [p.relative_to(REPO).as_posix() for p in (REPO / directory).rglob("*.py")]
        assert files and all(sent(f) for f in files if "__pycache__" not in f), directory
        assert not sent(f"{directory}/__pycache__/x.cpython-311.pyc")
    assert sent("pyproject.toml") and sent("README.md")
    for outside in ("tests/deploy/test_container.py", ".venv/bin/python", ".git/HEAD", "deploy/systemd/ddflow.service"):
        assert not sent(outside), outside


def test_images_run_ddflow_as_the_unprivileged_user() -> None:
    s = stages()
    assert list(s)[-1] == "runtime", "the default (last) target must be the daemon"
    scripts = PYPROJECT["project"]["scripts"]
    for name in ("runtime", "backfill"):
        assert s[name].one("USER") == "10001:10001"
        assert shlex.split(s[name].one("ENTRYPOINT").replace("[", "").replace("]", "").replace(",", " "))[0] in scripts
    assert "useradd --system --uid 10001" in s["base"].one("RUN")
    assert s["base"].one("STOPSIGNAL") == "SIGTERM"


def test_runtime_command_is_what_kubernetes_runs(base_docs: list[dict]) -> None:
    import json

    runtime = stages()["runtime"]
    command = json.loads(runtime.one("CMD"))
    (statefulset,) = [d for d in base_docs if d["kind"] == "StatefulSet"]
    (pod_container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert "command" not in pod_container, "the pod keeps the image's ENTRYPOINT"
    assert pod_container["args"] == command
    assert json.loads(runtime.one("ENTRYPOINT")) == ["ddflow"]
    exposed = int(runtime.one("EXPOSE"))
    assert exposed == next(p["containerPort"] for p in pod_container["ports"] if p["name"] == "metrics")
    assert json.loads(runtime.one("VOLUME")) == [
        next(m["mountPath"] for m in pod_container["volumeMounts"] if m["name"] == "checkpoints")]


def test_backfill_target_adds_a_java_that_pyspark_accepts() -> None:
    backfill = stages()["backfill"]
    assert backfill.base == "base"
    install = backfill.one("RUN")
    assert "openjdk-17-jre-headless" in install and "--no-install-recommends" in install
    assert "rm -rf /var/lib/apt/lists/*" in install
    pyspark = next(d for d in PYPROJECT["project"]["optional-dependencies"]["backfill"] if d.startswith("pyspark"))
    assert ">=4" in pyspark, "PySpark 4 needs Java 17 or newer; revisit the JRE if this pin changes"


def test_only_the_backfill_image_has_the_backfill_extra() -> None:
    """The daemon's image is ddflow alone; the backfill image's virtualenv adds the `backfill` extra."""
    s = stages()
    assert s["build-backfill"].base == "build"
    assert s["build-backfill"].one("RUN") == '/opt/ddflow/bin/pip install ".[backfill]"'
    assert "[" not in s["build"].one("RUN").split("pip install ", 1)[1].split()[0]
    venv = {name: [c for c in stage.all("COPY") if c.endswith(" /opt/ddflow /opt/ddflow")] for name, stage in s.items()}
    assert venv["runtime"] == ["--from=build /opt/ddflow /opt/ddflow"]
    assert venv["backfill"] == ["--from=build-backfill /opt/ddflow /opt/ddflow"]
    assert venv["base"] == []


@pytest.mark.parametrize("path", sorted([KUBERNETES / "base" / "kustomization.yaml",
                                         *KUBERNETES.glob("overlays/*/kustomization.yaml")]))
def test_kustomizations_name_the_image_the_dockerfile_builds(path: Path) -> None:
    import yaml

    images = yaml.safe_load(path.read_text()).get("images", [])
    assert [image["name"] for image in images] == ["ddflow"]
