"""Ahead-of-time compilation: the warm-up compiles every registered kernel into NUMBA_CACHE_DIR, and a
second process loads them from there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddflow.operators import kernels
from ddflow.operators.kernels import warm


def run_warm(cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "ddflow.operators.kernels.warm"], env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow  # compiles every kernel from nothing in a subprocess: minutes
def test_warm_up_compiles_every_kernel_into_the_cache_dir(tmp_path: Path) -> None:
    warm.import_all()
    names = sorted(kernels.KERNELS)
    first = run_warm(tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"{len(names)} of {len(names)} kernels" in first.stdout and str(tmp_path) in first.stdout
    index = sorted(p.name for p in tmp_path.rglob("*.nbi"))
    for name in names:  # one index file per kernel: <module>.<function>-<line>.py311.nbi
        assert any(i.startswith(name + "-") for i in index), (name, index)
    stamp = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.nbc")}
    second = run_warm(tmp_path)
    assert second.returncode == 0, second.stderr
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.nbc")} == stamp, "the second process recompiled"


def test_a_kernel_the_workload_misses_is_named(monkeypatch, capsys) -> None:
    import numba

    @numba.njit
    def never_called(x):
        return x

    monkeypatch.setitem(kernels.KERNELS, "test.never_called", never_called)
    monkeypatch.setattr(warm, "workload", lambda: None)
    assert warm.main() == 1
    err = capsys.readouterr().err  # kernels this process has not called yet are named too
    assert err.startswith("not exercised by the warm-up workload: ") and "test.never_called" in err
