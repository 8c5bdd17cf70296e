"""The before/after commands of docs/performance.md's kept-histories table run the before/after driver
on real benchmark scripts, with options those scripts accept."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from test_benchmark_commands import load

from support.docs import example

ROOT = Path(__file__).resolve().parents[2]


def commands() -> list[list[str]]:
    return [shlex.split(line) for line in example("reduce-history-benchmarks", "bash").splitlines() if line.strip()]


@pytest.mark.parametrize("argv", commands(), ids=lambda argv: " ".join(argv[2:]))
def test_command_names_a_benchmark_and_its_options_parse(argv):
    assert argv[:2] == [".venv/bin/python", "benchmarks/bench_reduce_history.py"]
    script = ROOT / "benchmarks" / argv[2]
    assert script.exists(), argv[2]
    module = load(script.stem)
    if hasattr(module, "arguments"):
        module.arguments().parse_args(argv[3:])
