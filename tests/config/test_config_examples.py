"""Every shipped example config loads, validates and names an importable dataflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddflow.config import example_paths, load_config, resolve_dataflow

EXAMPLES = example_paths()


def test_examples_are_shipped() -> None:
    assert {p.name for p in EXAMPLES} >= {"reachability.toml", "page-views-sasl.toml", "monotonic-sensors.toml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates(path: Path) -> None:
    config = load_config(path)
    assert config.inputs and config.outputs
    function = resolve_dataflow(config)
    assert callable(function)
    # the effective config is loggable as JSON
    assert json.loads(json.dumps(config.redacted()))["source"] == str(path)


def test_sasl_example_takes_secrets_from_env_and_file(tmp_path: Path) -> None:
    config = load_config(next(p for p in EXAMPLES if p.name == "page-views-sasl.toml"))
    assert {name: (ref.env, ref.file) for name, ref in config.kafka.secrets.items()} == {
        "sasl.password": ("DDFLOW_KAFKA_PASSWORD", None),
        "ssl.key.password": (None, Path("/run/secrets/ddflow-ssl-key-password")),
    }
    assert config.epoch.mode == "variable" and config.epoch.max_delay_ns == 20_000_000
