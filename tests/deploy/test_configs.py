"""Every worker config under deploy/ passes ``ddflow check-config`` (the installed CLI): it
validates, its secrets resolve from the environment the deployment provides, and its dataflow
builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_support import DEPLOY, KUBERNETES, SYSTEMD

CONFIGS = sorted(DEPLOY.rglob("*.toml"))
# What each deployment puts in the environment: the systemd EnvironmentFile, the pod's Secret.
SECRETS = {"KAFKA_SASL_USERNAME": "ddflow", "KAFKA_SASL_PASSWORD": "not-a-real-password"}


def check_config(path: Path, env: dict[str, str]) -> tuple[int, str]:
    """``ddflow check-config PATH`` with exactly ``env`` as the deployment's secrets."""
    ddflow = Path(sys.executable).parent / "ddflow"
    environ = {k: v for k, v in os.environ.items() if k not in SECRETS} | env
    result = subprocess.run([str(ddflow), "check-config", str(path)], capture_output=True, text=True,
                            timeout=120, check=False, env=environ)
    return result.returncode, result.stdout + result.stderr


def test_every_deploy_config_is_found() -> None:
    assert set(CONFIGS) == {SYSTEMD / "ddflow.toml", SYSTEMD / "workers.toml", KUBERNETES / "base" / "ddflow.toml",
                            KUBERNETES / "overlays" / "example" / "ddflow.toml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_config_passes_check_config(path: Path) -> None:
    code, output = check_config(path, SECRETS)
    assert code == 0, output
    assert output.startswith(f"ok: {path}") and "dataflow builds outputs" in output


@pytest.mark.parametrize("path", [SYSTEMD / "ddflow.toml", SYSTEMD / "workers.toml",
                                  KUBERNETES / "overlays" / "example" / "ddflow.toml"],
                         ids=lambda p: str(p.relative_to(DEPLOY)))
def test_missing_credentials_are_named(path: Path) -> None:
    code, output = check_config(path, {"KAFKA_SASL_USERNAME": "ddflow"})
    assert code == 2
    assert 'kafka.secrets."sasl.password"' in output and "KAFKA_SASL_PASSWORD" in output
    assert "not-a-real-password" not in output


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_endpoints_are_not_served_on_every_interface(path: Path) -> None:
    """No deploy config binds the endpoints on 0.0.0.0 or [::]; Kubernetes serves them on the pod IP."""
    from ddflow.config import load_config

    metrics = load_config(path).metrics
    assert metrics.host not in ("0.0.0.0", "::", ""), f"{path}: metrics.address {metrics.address}"
    assert metrics.max_connections <= 64 and metrics.request_timeout_ns <= 30 * 10**9
    everything = "".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file() and p.suffix != ".json")
    assert "= \"0.0.0.0" not in everything and "\"0.0.0.0:" not in everything


def test_the_stop_timeout_fits_inside_the_supervisors_stop_timeouts() -> None:
    """After SIGTERM a blocked worker loop gets worker.stop_timeout, then the daemon exits 1 by itself:
    that must come before systemd's TimeoutStopSec or the pod's grace period SIGKILLs it."""
    import yaml

    from ddflow.config import load_config
    from deploy_support import last, unit

    systemd_stop = int(last(unit("ddflow.service"), "Service", "TimeoutStopSec").rstrip("s"))
    assert load_config(SYSTEMD / "ddflow.toml").worker.stop_timeout_ns / 1e9 + 5 <= systemd_stop
    assert last(unit("ddflow@.service"), "Service", "TimeoutStopSec") == f"{systemd_stop}s"
    assert last(unit("ddflow-worker@.service"), "Service", "TimeoutStopSec") == f"{systemd_stop}s"
    statefulset = yaml.safe_load((KUBERNETES / "base" / "statefulset.yaml").read_text())
    grace = statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    for path in (KUBERNETES / "base" / "ddflow.toml", KUBERNETES / "overlays" / "example" / "ddflow.toml"):
        assert load_config(path).worker.stop_timeout_ns / 1e9 + 5 <= grace, path
