"""The "Checkpoints and backfill" section of docs/operations.md cannot go stale: its commands parse
with the real CLI, the benchmarks it and the performance page name exist, and the checkpoint keys of
the configuration reference are the loader's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ddflow.config import parse_config
from ddflow.daemon.cli.parser import build_parser
from support.docs import example, section

ROOT = Path(__file__).resolve().parents[2]


def test_commands_parse_with_the_cli():
    assert "```bash\n" + example("backfill", "bash") in section("operations.md", "Checkpoints and backfill")
    commands = [shlex.split(line) for line in example("backfill").splitlines() if line.startswith("ddflow ")]
    assert [c[1] for c in commands] == ["backfill", "run"]
    parser = build_parser({})
    backfill = parser.parse_args(commands[0][1:])
    assert backfill.archives == ["edges=/data/history/edges"] and backfill.offsets == ["edges:0=184467,1=183990"]
    assert backfill.frontier == 1704067200000000000 and backfill.master == "local[*]"
    run = parser.parse_args(commands[1][1:])
    assert run.snapshot_from == backfill.output


def test_named_benchmarks_exist_and_the_checkpoint_keys_load(tmp_path):
    text = section("performance.md", "Checkpoints, restarts, backlogs and backfill")
    scripts = re.findall(r"(benchmarks/\w+\.py)", text)
    assert {Path(s).stem for s in scripts} >= {"bench_checkpoint", "bench_restart", "bench_backlog", "bench_backfill"}
    for script in scripts:
        assert (ROOT / script).is_file(), script
    toml = example("config-reference", "toml")
    config = parse_config(toml, tmp_path / "daemon.toml")
    assert (config.checkpoint.keep, config.checkpoint.shards, config.checkpoint.interval_ns) == (3, 4, 60 * 10**9)
