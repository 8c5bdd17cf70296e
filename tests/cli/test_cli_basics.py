"""The installed ``ddflow`` entry point, run as a subprocess: help, check-config, broker."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
from support.daemons import DDFLOW

from ddflow.config import example_paths


def ddflow(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_BOOTSTRAP"))}
    return subprocess.run([DDFLOW, *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})})


def test_entry_point_is_installed() -> None:
    assert Path(DDFLOW).is_file()


def test_help_lists_every_command() -> None:
    result = ddflow("--help")
    assert result.returncode == 0
    for command in ("run", "check-config", "broker", "produce", "tail", "demo", "compile"):
        assert command in result.stdout
    assert "[env: DDFLOW_LOG_LEVEL]" in result.stdout


def test_compile_on_a_warm_cache_compiles_nothing() -> None:
    ddflow("compile", timeout=900)  # whatever this checkout's cache lacks (nothing, usually)
    result = ddflow("compile")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("0 kernels compiled; cache: ") and result.stderr == ""


@pytest.mark.parametrize(("command", "variables"), [
    ("run", ["DDFLOW_CONFIG", "KAFKA_BOOTSTRAP", "DDFLOW_METRICS_ADDRESS"]),
    ("check-config", ["DDFLOW_CONFIG"]),
    ("broker", ["DDFLOW_BROKER_PORT"]),
    ("produce", ["KAFKA_BOOTSTRAP"]),
    ("tail", ["KAFKA_BOOTSTRAP"]),
    ("demo", ["KAFKA_BOOTSTRAP", "DDFLOW_METRICS_ADDRESS"]),
])
def test_help_names_the_environment_fallbacks(command: str, variables: list[str]) -> None:
    result = ddflow(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for variable in variables:
        assert f"[env: {variable}]" in text


def test_run_requires_a_config_unless_the_environment_gives_one() -> None:
    result = ddflow("run")
    assert result.returncode == 2 and "--config" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "json"], "--format json needs the output's --progress-topic"),
    (["--progress-topic", "p"], "--progress-topic and --fields are for --format json or debezium"),
    (["--format", "debezium", "--progress-topic", "p", "--upsert"], "--upsert is for --format json outputs"),
])
def test_tail_format_options_are_checked_before_connecting(args: list[str], message: str) -> None:
    result = ddflow("tail", "--topic", "t", "--bootstrap", "127.0.0.1:1", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_check_config_accepts_every_example(path: Path) -> None:
    result = ddflow("check-config", str(path), "--skip-secrets")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: {path}")
    assert "dataflow builds outputs" in result.stdout


def test_check_config_names_the_formats() -> None:
    path = next(p for p in example_paths() if p.name == "page-titles.toml")
    out = ddflow("check-config", str(path)).stdout
    assert "pages <- cms.public.pages (debezium, monotonic, late=advance)" in out
    assert "views_per_title -> views-per-title (debezium, progress -> ddflow-progress)" in out


def test_check_config_from_the_environment_and_print(tmp_path: Path) -> None:
    path = example_paths()[0]
    result = ddflow("check-config", "--print", "--skip-secrets", env={"DDFLOW_CONFIG": str(path)})
    assert result.returncode == 0, result.stderr
    assert f'"source": "{path}"' in result.stdout


def test_check_config_reports_missing_secrets_by_key_without_values(tmp_path: Path) -> None:
    path = next(p for p in example_paths() if p.name == "page-views-sasl.toml")
    result = ddflow("check-config", str(path))
    assert result.returncode == 2
    assert f'{path}: kafka.secrets."sasl.password": environment variable DDFLOW_KAFKA_PASSWORD is not set' \
        in result.stderr
    result = ddflow("check-config", str(path), "--print", env={"DDFLOW_KAFKA_PASSWORD": "s3cr3t-value"})
    assert result.returncode == 2  # the file secret is still missing
    assert "s3cr3t-value" not in result.stdout + result.stderr


def test_check_config_refuses_inline_credentials_and_print_masks_secret_names(tmp_path: Path) -> None:
    path = tmp_path / "inline.toml"
    text = next(p for p in example_paths() if p.name == "reachability.toml").read_text()
    assert text.count("[kafka.options]\n") == 1 and text.count("args = { roots = [") == 1
    path.write_text(text.replace("[kafka.options]\n", '[kafka.options]\n"SASL.PASSWORD" = "hunter2-inline"\n'
                                 '"sasl.jaas.config" = "x password=hunter2-jaas;"\n'))
    result = ddflow("check-config", str(path), "--print")
    assert result.returncode == 2
    assert f'{path}: kafka.options."SASL.PASSWORD": is a credential' in result.stderr
    assert f'{path}: kafka.options."sasl.jaas.config": is a credential' in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    path.write_text(text.replace("args = { roots = [", 'args = { service_token = "hunter2-arg", roots = ['))
    result = ddflow("check-config", str(path), "--print", "--skip-build")
    assert result.returncode == 0, result.stderr
    assert '"service_token": "***"' in result.stdout and "hunter2" not in result.stdout


def _with_options(tmp_path: Path, lines: str) -> Path:
    path = tmp_path / "options.toml"
    text = next(p for p in example_paths() if p.name == "reachability.toml").read_text()
    path.write_text(text.replace("[kafka.options]\n", "[kafka.options]\n" + lines))
    return path


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_bad_librdkafka_options_are_reported_by_name_before_anything_starts(tmp_path: Path, command: str) -> None:
    path = _with_options(tmp_path, '"fetch.wait.maxms" = 10\n"compression.type" = "zip"\n"linger.ms" = -1\n'
                                   '"enable.partition.eof" = "maybe"\n')
    args = [str(path)] if command == "check-config" else ["--config", str(path), "--bootstrap", "127.0.0.1:1"]
    result = ddflow(command, *args, env={"DDFLOW_METRICS_ADDRESS": "127.0.0.1:0"}, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert f'{path}: kafka.options."fetch.wait.maxms": No such configuration property: "fetch.wait.maxms"' in lines
    assert f'{path}: kafka.options."compression.type": Invalid value "zip" for configuration property ' \
           '"compression.codec"' in lines  # librdkafka's alias, under the name the user wrote
    assert any(line.startswith(f'{path}: kafka.options."linger.ms": ') and "outside allowed range" in line
               for line in lines)
    assert any(line.startswith(f'{path}: kafka.options."enable.partition.eof": ') for line in lines)


def test_options_refused_together_and_misspelt_secret_names_are_reported(tmp_path: Path) -> None:
    path = _with_options(tmp_path, '"acks" = "1"\n')
    result = ddflow("check-config", str(path), "--skip-build")
    assert result.returncode == 2
    assert f"{path}: kafka.options: Failed to create producer: `acks` must be set to `all` when " \
           "`enable.idempotence` is true (the output producer refuses these options together)" in result.stderr
    path = _with_options(tmp_path, "")
    path.write_text(path.read_text() + '\n[kafka.secrets]\n"sasl.pasword" = { env = "PW_FOR_A_TEST" }\n')
    result = ddflow("check-config", str(path), "--skip-build", env={"PW_FOR_A_TEST": "hunter2-secret"})
    assert result.returncode == 2
    assert f'{path}: kafka.secrets."sasl.pasword": No such configuration property: "sasl.pasword"' in result.stderr
    assert "hunter2" not in result.stderr


def test_check_config_names_the_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(example_paths()[0].read_text().replace('late = "advance"', 'late = "later"'))
    result = ddflow("check-config", str(path))
    assert result.returncode == 2
    assert f"{path}: inputs[0].late: 'later' is not one of 'advance', 'reject'" in result.stderr


def test_check_config_builds_the_dataflow_and_checks_its_outputs(tmp_path: Path) -> None:
    (tmp_path / "flow_wrong_outputs.py").write_text(textwrap.dedent("""
        def build(df, inputs):
            return {"not_configured": inputs["edges"]}
    """))
    path = tmp_path / "daemon.toml"
    path.write_text(textwrap.dedent("""
        [dataflow]
        function = "flow_wrong_outputs:build"
        path = ["."]
        [[inputs]]
        name = "edges"
        topic = "edges"
        fields = ["src", "dst"]
        [[outputs]]
        name = "reachable"
        topic = "reachable"
    """))
    result = ddflow("check-config", str(path))
    assert result.returncode == 2
    assert f"{path}: dataflow.function:" in result.stderr
    assert "missing: reachable; not configured: not_configured" in result.stderr
    assert ddflow("check-config", str(path), "--skip-build").returncode == 0


@pytest.mark.kafka
def test_broker_prints_its_address_serves_kafka_and_stops_on_sigterm() -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    process = subprocess.Popen([DDFLOW, "broker", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("ddflow broker: listening on 127.0.0.1:"), first + process.stderr.read()
        bootstrap = first.split()[4]
        assert process.stdout.readline().strip() == f"export KAFKA_BOOTSTRAP={bootstrap}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("cli-broker-check", 1, 1)])["cli-broker-check"].result(timeout=10)
        assert "cli-broker-check" in admin.list_topics(timeout=10).topics
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "ddflow broker: stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
