"""The README's operational sections cannot go stale: commands, the config snippet, the metrics table."""

from __future__ import annotations

import re
from pathlib import Path

from ddflow.config import parse_config, resolve_dataflow
from ddflow.daemon.metrics import METRIC_NAMES

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, flags=re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_first_two_commands_are_the_demo_and_the_ci_test_command() -> None:
    (lang1, demo), (lang2, tests) = BLOCKS[:2]
    assert lang1 == lang2 == "bash"
    assert demo.strip() == "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/ddflow demo"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests.strip() in ci.splitlines()


def test_configuration_snippet_is_a_valid_config(tmp_path: Path) -> None:
    toml = next(code for lang, code in re.findall(r"```(\w+)\n(.*?)```", section("Configuration"), flags=re.S)
                if lang == "toml")
    config = parse_config(toml, tmp_path / "daemon.toml")
    assert [i.name for i in config.inputs] == ["edges"] and config.kafka.secrets
    assert resolve_dataflow(config).__name__ == "reachability"


def test_metrics_table_lists_exactly_the_exported_names() -> None:
    names = re.findall(r"^\| `(ddflow_\w+)` \|", section("Metrics"), flags=re.M)
    assert names == list(METRIC_NAMES)
