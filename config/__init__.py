"""ddflow configuration: the TOML schema and its loader.

``load_config(path)`` reads one daemon's config file and returns a frozen ``Config``; every problem
is reported as a ``ConfigError`` naming the file and the key. ``resolve_dataflow`` imports the
configured ``module:function``; ``build_dataflow`` calls it and checks its outputs. Example
configurations live in ``ddflow/config/examples/`` (``example_paths()``).
"""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError, DdflowError, Problem
from .loader import load_config, parse_config
from .reference import build_dataflow, resolve_dataflow
from .schema import (
    CheckpointConfig,
    Config,
    DataflowConfig,
    EpochConfig,
    Field,
    InputConfig,
    KafkaConfig,
    MetricsConfig,
    OutputConfig,
    WorkerConfig,
    WorkersConfig,
)
from .secrets import Secret, SecretRef
from .table import parse_address, parse_duration

__all__ = [
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DataflowConfig",
    "DdflowError",
    "EpochConfig",
    "Field",
    "InputConfig",
    "KafkaConfig",
    "MetricsConfig",
    "OutputConfig",
    "Problem",
    "Secret",
    "SecretRef",
    "WorkerConfig",
    "WorkersConfig",
    "build_dataflow",
    "example_paths",
    "load_config",
    "parse_address",
    "parse_config",
    "parse_duration",
    "resolve_dataflow",
]

EXAMPLES = Path(__file__).parent / "examples"


def example_paths() -> list[Path]:
    """The shipped example configurations, sorted by name."""
    return sorted(EXAMPLES.glob("*.toml"))
