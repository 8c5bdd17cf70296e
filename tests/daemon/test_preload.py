"""`ddflow run` loads numba (the kernels' compiler) in a thread of its own while it connects to
Kafka (`ddflow.daemon.preload`): the thread fills numba's registries, so that the first kernel call
does not, and imports no ddflow module (the main thread imports those)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ddflow.daemon.commands as commands
import ddflow.daemon.preload as preload
from ddflow.daemon.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def test_preload_fills_numba_registries_and_imports_no_ddflow_module():
    probe = """
import json, sys
before = set(sys.modules)
from ddflow.daemon import preload  # the package and this module: light
light = set(sys.modules)
preload.start().join(120)
from numba.core.registry import cpu_target
print(json.dumps({"registries": len(cpu_target.target_context._registries),
                  "ddflow": sorted(m for m in set(sys.modules) - light if m.startswith("ddflow")),
                  "numba": "numba" in sys.modules}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["numba"] and got["registries"] > 0, got  # what the first kernel call would otherwise do
    assert got["ddflow"] == [], got  # two threads importing ddflow modules could deadlock


def test_a_failing_preload_is_logged_and_changes_nothing(monkeypatch, caplog):
    def broken() -> float:
        raise ImportError("no numba here")

    monkeypatch.setattr(preload, "preload", broken)
    preload.start().join(10)
    assert any("loading numba in the background failed" in r.getMessage() for r in caplog.records)


def test_ddflow_run_starts_the_preload_before_the_daemon(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(preload, "start", lambda: calls.append("preload"))
    monkeypatch.setattr(commands, "run_daemon", lambda config, **kw: calls.append("daemon") or 0)
    assert main(["run", "--config", str(EXAMPLES / "reachability.toml"), "--bootstrap", "127.0.0.1:9"]) == 0
    assert calls == ["preload", "daemon"]


def test_check_config_does_not_preload(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(preload, "start", lambda: calls.append("preload"))
    main(["check-config", str(EXAMPLES / "reachability.toml")])
    assert calls == []
