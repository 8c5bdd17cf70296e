"""The README's "Checkpoints and backfill" section cannot go stale: its commands parse with the
real CLI, the files and benchmarks it names exist, and its config keys are the loader's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ddflow.config import parse_config
from ddflow.daemon.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, flags=re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_commands_parse_with_the_cli():
    blocks = re.findall(r"```bash\n(.*?)```", section("Checkpoints and backfill"), flags=re.S)
    commands = [shlex.split(line) for block in blocks for line in block.splitlines() if line.startswith("ddflow ")]
    assert [c[1] for c in commands] == ["backfill", "run"]
    parser = build_parser({})
    backfill = parser.parse_args(commands[0][1:])
    assert backfill.archives == ["edges=/data/history/edges"] and backfill.offsets == ["edges:0=184467,1=183990"]
    assert backfill.frontier == 1704067200000000000 and backfill.master == "local[*]"
    run = parser.parse_args(commands[1][1:])
    assert run.snapshot_from == backfill.output


def test_named_benchmarks_exist_and_the_checkpoint_keys_load(tmp_path):
    text = section("Checkpoints and backfill")
    for script in re.findall(r"(tests/benchmarks/\w+\.py)", text):
        assert (ROOT / script).is_file(), script
    toml = re.search(r"```toml\n(.*?)```", section("Configuration"), flags=re.S).group(1)
    config = parse_config(toml, tmp_path / "daemon.toml")
    assert (config.checkpoint.keep, config.checkpoint.shards, config.checkpoint.interval_ns) == (3, 4, 60 * 10**9)
