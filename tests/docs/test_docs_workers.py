"""The deployment guide's "Running several workers" example runs as written: two `ddflow run`
processes of config/examples/reachability-workers.toml on the development broker share the
dataflow, and `ddflow tail` reads the union of their outputs (a free port instead of 9092 and of
the two metrics ports, and a bounded tail)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddflow.config import load_config
from support.daemons import free_port
from support.docs import ROOT, example

pytestmark = pytest.mark.kafka


def test_the_example_config_is_for_two_workers() -> None:
    block = example("workers-one-host", "bash")
    config = load_config(ROOT / "config" / "examples" / "reachability-workers.toml")
    assert config.workers.count == 2 and "for i in 0 1;" in block
    assert f"--topic {config.inputs[0].topic} " in block and f"--topic {config.outputs[0].topic} " in block


def test_two_workers_on_one_host_run_as_written() -> None:
    block = example("workers-one-host", "bash")
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    *start, tail = block.strip().splitlines()
    assert tail.startswith(".venv/bin/ddflow tail --topic workers-reachable ")
    # the tail, bounded, again until both workers are up and the epoch is final (on a loaded
    # machine the two starts take longer than one bounded tail)
    tail = tail.split("#", 1)[0].strip() + " --duration 3"
    script = "\n".join([*start, f'for attempt in $(seq 40); do out=$({tail}); '
                         'case "$out" in *"frontier 2000000000"*) break;; esac; done; echo "$out"'])
    script = (script.replace("127.0.0.1:9092", f"127.0.0.1:{port}").replace(".venv/bin", bin_dir)
              .replace("127.0.0.1:$((9464 + i))", "127.0.0.1:0"))
    assert script.count("127.0.0.1:0") == 1
    script = f"set -u\ncd {ROOT}\ntrap 'kill -TERM $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "DDFLOW_"))}
    env.update({"DDFLOW_BROKER_PORT": str(port), "DDFLOW_LOG_LEVEL": "INFO"})
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    # each root reaches itself, root 0 also node 1: in the view at the frontier, or as a live change
    assert "view at frontier 2000000000: 11 records" in out and "  (0, 1)\n" in out \
        or "  +1 (0, 1) @ 1000000000\n" in out, out + result.stderr[-3000:]
