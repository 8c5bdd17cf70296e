"""Ahead-of-time compilation: every registered kernel is in numba's on-disk cache after the warm-up,
and a second process loads them from there.

The session's warm-up (``compiled_kernels`` in tests/conftest.py) is the cold run on a fresh clone
(CI's): it compiles every kernel missing from the cache in parallel processes, as a first ``ddflow
run`` does, then runs the warm-up module's workload. Filling a cold ``NUMBA_CACHE_DIR`` by those
processes and loading it in the next is ``test_precompile.py``'s (for two kernels: compiling all of
them a second time, into a directory of their own, cost a few minutes of CPU per run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddflow.operators import kernels
from ddflow.operators.kernels import warm


@pytest.mark.compiles
def test_every_kernel_is_cached_and_the_warm_up_in_a_new_process_compiles_none() -> None:
    warm.import_all()
    names = sorted(kernels.KERNELS)
    folders = {Path(k._cache.cache_path) for k in kernels.KERNELS.values()}
    index = sorted(p.name for folder in folders for p in folder.glob("*.nbi"))
    for name in names:  # one index file per kernel: <module>.<function>-<line>.py311.nbi
        assert any(i.startswith(name + "-") for i in index), (name, index)
    stamp = {p: p.stat().st_mtime_ns for folder in folders for p in folder.glob("*.nbc")}
    second = subprocess.run([sys.executable, "-m", "ddflow.operators.kernels.warm"], env=dict(os.environ),
                            capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the sources (__pycache__)"
    assert f"{len(names)} of {len(names)} kernels" in second.stdout and where in second.stdout, second.stdout
    assert "(0 compiled in parallel processes)" in second.stdout, second.stdout
    assert {p: p.stat().st_mtime_ns for folder in folders for p in folder.glob("*.nbc")} == stamp, \
        "the second process recompiled"


@pytest.mark.compiles
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
