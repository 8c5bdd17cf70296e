"""``ddflow backfill`` then ``ddflow run --snapshot-from`` as subprocesses, on local Spark and the broker.

The backfill (its own Spark, on local[2]) prints stage progress and its summary; the daemon
loads the snapshot, publishes the output at F and the live tail after it, writes a checkpoint
when stopped with SIGTERM, and a restart restores that checkpoint instead of the backfill.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from backfill_support import INPUTS, OUTPUTS, history, oracle, tail
from support.daemons import DDFLOW, Daemon
from test_backfill import produce, write_archive

from ddflow.daemon.state.checkpoint import CheckpointStore
from ddflow.daemon.kafka.results import ResultClient

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

F = 1_000_000
STEP = 100_000


def environment():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_BOOTSTRAP"))}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def config(path: Path, bootstrap: str, topics: dict[str, str], checkpoints: Path, *, kafka: str = "",
           extra: str = "") -> Path:
    """The daemon config of the backfill tests; ``kafka``: more lines of its [kafka] table, ``extra``:
    more tables at its end."""
    inputs = "".join(f'''
[[inputs]]
name = "{n}"
topic = "{topics[n]}"
fields = {{ key = "int", val = "int" }}
''' for n in INPUTS)
    outputs = "".join(f'''
[[outputs]]
name = "{n}"
topic = "{topics[n]}"
''' for n in OUTPUTS)
    path.write_text(f'''
[dataflow]
function = "backfill_support:counts_matched"
path = ["{Path(__file__).parent}"]

[kafka]
bootstrap = "{bootstrap}"
{kafka}{inputs}{outputs}
[epoch]
resolution = "100us"

[dead_letter]
topic = "{topics['dlq']}"

[checkpoint]
location = "{checkpoints}"
interval = "1h"
shards = 3

[metrics]
address = "127.0.0.1:0"
{extra}''')
    return path


def test_backfill_command_then_run_from_the_snapshot(kafka_options, make_topic, tmp_path):
    past = history(4, 20_000, F, keys=2000)
    live = tail(5, F, steps=3, step=STEP, per_step=200, keys=2000)
    topics = {n: make_topic(n, partitions=2) for n in INPUTS + OUTPUTS}
    topics["dlq"] = make_topic("dlq")
    cfg = config(tmp_path / "daemon.toml", kafka_options["bootstrap.servers"], topics, tmp_path / "ckpt")
    archives = {n: write_archive(tmp_path / "archive" / n, past[n], files=2)[0] for n in INPUTS}

    bad = subprocess.run([DDFLOW, "backfill", "--config", str(cfg), "--input", f"c={archives['a']}",
                          "--output", str(tmp_path / "x")], capture_output=True, text=True, env=environment())
    assert bad.returncode == 2 and "the config has no input 'c' (inputs: ['a', 'b'])" in bad.stderr
    bad = subprocess.run([DDFLOW, "backfill", "--config", str(cfg), "--input", f"a={archives['a']}",
                          "--offsets", "a:zero=1", "--output", str(tmp_path / "x")], capture_output=True, text=True,
                         env=environment())
    assert bad.returncode == 2 and "--offsets 'a:zero=1': expected NAME:PARTITION=OFFSET" in bad.stderr

    snapshot = tmp_path / "snapshot"
    done = subprocess.run([DDFLOW, "backfill", "--config", str(cfg), "--input", f"a={archives['a']}",
                           "--input", f"b={archives['b']}", "--output", str(snapshot), "--frontier", str(F),
                           "--master", "local[2]"], capture_output=True, text=True, env=environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tasks done" in done.stderr and "records at the frontier" in done.stderr
    assert f"snapshot {snapshot}: frontier {F}, a: {len(past['a'])} updates" in done.stdout
    assert f"--snapshot-from {snapshot}" in done.stdout

    daemon = Daemon(cfg, "--snapshot-from", str(snapshot), env=environment())
    try:
        end = max(produce(kafka_options, topics[n], live[n], STEP) for n in INPUTS)
        captures = oracle({n: past[n] + live[n] for n in INPUTS})
        for out in OUTPUTS:
            with ResultClient(topics[out], kafka_options) as client:
                first = None
                for change in client.changes(timeout=120):
                    first = first or change.frontier
                    assert client.view == captures[out].at(change.frontier - 1), f"{out} at {change.frontier}"
                    if change.frontier >= end:
                        break
                assert first == F and client.frontier == end
        assert daemon.stop() == 0, daemon.log[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
    assert f"loading snapshot {snapshot}" in daemon.log and "publishing the output at frontier" in daemon.log
    store = CheckpointStore(tmp_path / "ckpt")
    assert [CheckpointStore(tmp_path / "ckpt").latest().frontier] == [end] and len(store.checkpoints()) == 1

    again = Daemon(cfg, "--snapshot-from", str(snapshot), env=environment())
    try:
        deadline = time.monotonic() + 120
        while "restoring checkpoint" not in again.log:
            assert again.process.poll() is None and time.monotonic() < deadline, again.log[-3000:]
            time.sleep(0.1)
        assert again.stop() == 0
    finally:
        if again.process.poll() is None:
            again.process.kill()
    assert "loading snapshot" not in again.log
