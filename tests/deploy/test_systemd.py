"""deploy/systemd: the units pass ``systemd-analyze verify`` (no warning either) and its offline
security review, carry the keys the issue asks for, agree with each other, with the daemon's CLI,
with the sysusers entry and with the example config they point at."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path, PurePosixPath

import pytest

from deploy_support import SYSTEMD, last, run, unit

UNITS = ["ddflow.service", "ddflow@.service", "ddflow-worker@.service"]
INSTALLED_BINARY = "/opt/ddflow/bin/ddflow"  # where the deployment guide's install note puts the entry point
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "CapabilityBoundingSet": "",
}
# systemd-analyze security's exposure scale is 0-100 (printed as 0.0-10.0); 20 = "2.0", well into "OK".
MAX_EXPOSURE = 20


@pytest.fixture
def installed_units(tmp_path: Path) -> Path:
    """The units as they would be installed, with ExecStart's binary at a path that exists here
    (``systemd-analyze verify`` checks that it is executable): the venv's ``ddflow``."""
    here = Path(sys.executable).parent / "ddflow"
    assert here.is_file(), "the ddflow entry point is not installed in this environment"
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        assert INSTALLED_BINARY in text
        (tmp_path / name).write_text(text.replace(INSTALLED_BINARY, str(here)))
    return tmp_path


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("SYSTEMD-ANALYZE UNAVAILABLE: install Debian's 'systemd' package to verify the units; "
                    "the parser checks below still run")
    return found


def verify(path: Path) -> tuple[int, str]:
    """``systemd-analyze verify``: its exit code, and its complaints (unknown keys only warn)."""
    result = run([systemd_analyze(), "verify", str(path)], cwd=path.parent)
    return result.returncode, (result.stdout + result.stderr).strip()


# -- systemd's own checks --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ddflow.service", "ddflow@.service", "ddflow@worker-1.service",
                                  "ddflow-worker@.service", "ddflow-worker@1.service"])
def test_systemd_analyze_verify_is_clean(installed_units: Path, name: str) -> None:
    code, complaints = verify(installed_units / name)
    assert code == 0 and complaints == "", complaints


def test_verify_reports_a_bad_unit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.service"
    bad.write_text(f"[Service]\nExecStart={shutil.which('true')}\nRestart=sometimes\nPrivateTmpp=yes\n")
    code, complaints = verify(bad)
    assert "restart specifier" in complaints and "PrivateTmpp" in complaints


@pytest.mark.parametrize("name", ["ddflow.service", "ddflow@worker-1.service", "ddflow-worker@1.service"])
def test_offline_security_review_rates_the_units_ok(installed_units: Path, name: str) -> None:
    result = run([systemd_analyze(), "security", "--offline=true", f"--threshold={MAX_EXPOSURE}",
                  str(installed_units / name)], cwd=installed_units)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert level is not None and float(level.group(1)) * 10 <= MAX_EXPOSURE


# -- what the units say --------------------------------------------------------------------------

@pytest.mark.parametrize("name", UNITS)
def test_unit_runs_ddflow_run_as_an_unprivileged_service(name: str) -> None:
    from ddflow.daemon.cli.parser import build_parser

    u = unit(name)
    argv = shlex.split(last(u, "Service", "ExecStart"))
    assert argv[0] == INSTALLED_BINARY
    args = build_parser(environ={}).parse_args([a.replace("%i", "7") if a == "%i" else a for a in argv[1:]])
    assert args.command == "run"
    instance = "%i" if name == "ddflow@.service" else "ddflow"
    if name == "ddflow-worker@.service":  # worker %i of the one config's workers.count
        assert (args.config, args.worker_index) == ("/etc/ddflow/workers.toml", 7) and "%i" in argv
    else:
        assert args.config == f"/etc/ddflow/{instance}.toml" and args.worker_index is None
    assert last(u, "Service", "User") == last(u, "Service", "Group") == "ddflow"
    assert last(u, "Service", "Restart") == "on-failure"
    # restarted for as long as an outage lasts: no start rate limit that stops the unit for good
    assert last(u, "Unit", "StartLimitIntervalSec") == "0" and ("Unit", "StartLimitBurst") not in u
    assert re.fullmatch(r"\d+s", last(u, "Service", "RestartSec"))
    # but not a fenced daemon (another instance took over): restarting it would fence that one in turn
    from ddflow.daemon.cli.usage import EXIT_FENCED

    assert last(u, "Service", "RestartPreventExitStatus") == str(EXIT_FENCED)
    assert last(u, "Service", "KillSignal") == "SIGTERM"
    assert re.fullmatch(r"\d+s", last(u, "Service", "TimeoutStopSec"))
    assert last(u, "Install", "WantedBy") == "multi-user.target"
    for key, value in HARDENING.items():
        assert last(u, "Service", key) == value, key
    state = last(u, "Service", "StateDirectory")
    assert state == {"ddflow.service": "ddflow", "ddflow@.service": "ddflow/%i"}.get(name, "ddflow/worker-%i")
    assert last(u, "Service", "WorkingDirectory") == f"/var/lib/{state}"


def test_template_differs_from_the_single_unit_only_by_instance() -> None:
    single, template = unit("ddflow.service"), unit("ddflow@.service")
    differing = {key for key in single.keys() | template.keys() if single.get(key) != template.get(key)}
    assert differing == {("Unit", "Description"), ("Service", "ExecStart"), ("Service", "EnvironmentFile"),
                         ("Service", "StateDirectory"), ("Service", "WorkingDirectory")}
    for key in differing - {("Unit", "Description")}:
        assert any("%i" in value for value in template[key]), key


def test_sysusers_creates_the_service_user() -> None:
    (line,) = [ln for ln in (SYSTEMD / "ddflow.sysusers.conf").read_text().splitlines() if ln and ln[0] != "#"]
    kind, name, _id, _gecos, home, *_ = shlex.split(line)
    assert (kind, name, home) == ("u", last(unit("ddflow.service"), "Service", "User"), "/var/lib/ddflow")


def test_example_config_fits_the_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddflow.config import load_config

    config = load_config(SYSTEMD / "ddflow.toml")
    state = PurePosixPath("/var/lib") / last(unit("ddflow.service"), "Service", "StateDirectory")
    assert state in PurePosixPath(config.checkpoint.location).parents, (
        "checkpoints must live in the unit's StateDirectory: ProtectSystem=strict makes the rest read-only")
    # every secret it needs is named in the example environment file the unit reads
    example_env = dict(ln.split("=", 1) for ln in (SYSTEMD / "ddflow.env.example").read_text().splitlines()
                       if ln and ln[0] != "#")
    assert {ref.env for ref in config.kafka.secrets.values()} <= set(example_env)
    for name, value in example_env.items():
        monkeypatch.setenv(name, value)
    assert config.client_options()["sasl.password"] == example_env["KAFKA_SASL_PASSWORD"]


def test_worker_template_differs_from_the_config_template_only_by_what_makes_a_worker() -> None:
    per_config, per_worker = unit("ddflow@.service"), unit("ddflow-worker@.service")
    differing = {key for key in per_config.keys() | per_worker.keys() if per_config.get(key) != per_worker.get(key)}
    assert differing == {("Unit", "Description"), ("Service", "ExecStart"), ("Service", "EnvironmentFile"),
                         ("Service", "StateDirectory"), ("Service", "WorkingDirectory")}
    # the worker's own env file is required: without it two workers would take the same metrics port
    assert per_worker[("Service", "EnvironmentFile")] == ["-/etc/ddflow/ddflow.env", "/etc/ddflow/worker-%i.env"]


def test_worker_example_config_and_env_fit_the_worker_template() -> None:
    from ddflow.config import load_config, parse_address
    from ddflow.daemon.cli.parser import build_parser
    from ddflow.daemon.cluster.identity import worker_identity

    config = load_config(SYSTEMD / "workers.toml")
    assert config.workers.count >= 2 and config.workers.index is None  # the unit gives the index
    argv = shlex.split(last(unit("ddflow-worker@.service"), "Service", "ExecStart"))
    env = dict(ln.split("=", 1) for ln in (SYSTEMD / "worker.env.example").read_text().splitlines()
               if ln and ln[0] != "#")
    assert set(env) == {"DDFLOW_METRICS_ADDRESS"}
    for i in range(config.workers.count):  # what `systemctl start ddflow-worker@I` parses
        args = build_parser(environ=env).parse_args([a.replace("%i", str(i)) for a in argv[1:]])
        assert worker_identity(config, args.worker_index) == (i, config.workers.count)
        assert parse_address(args.metrics_address)[0] == "127.0.0.1"
