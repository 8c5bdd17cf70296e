"""The light commands stay light: `ddflow --help`, `produce` and `tail` import neither the Arrow/Spark
stack nor (for help) the Kafka client or the engine; the daemon package loads its modules on use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pyarrow", "pyspark", "pandas", "confluent_kafka", "numpy", "numba")


def loaded_after(code: str) -> set[str]:
    probe = f"""
import json, sys
{code}
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--help"], ["produce", "--help"], ["tail", "--help"], ["run", "--help"]])
def test_help_imports_nothing_heavy(argv):
    code = f"""
from ddflow.daemon.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
"""
    assert loaded_after(code) == set()


def test_produce_and_tail_modules_leave_arrow_and_spark_alone():
    loaded = loaded_after("import ddflow.daemon.kafka.producer, ddflow.daemon.kafka.results")
    assert not loaded & {"pyarrow", "pyspark", "pandas"}, loaded


def test_the_daemon_package_loads_its_public_names_on_use():
    code = "import ddflow.daemon as d\nassert 'confluent_kafka' not in sys.modules\nd.UpdateProducer"
    assert "confluent_kafka" in loaded_after(code)


def blas_threads_after(code: str, env: dict[str, str]) -> tuple[int, int]:
    """Threads of a fresh process after ``code`` and then ``import numpy``, against a process that
    imports numpy alone, both under ``env`` (the BLAS variables removed from this one's)."""
    import os

    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                                               "OMP_NUM_THREADS")}
    count = "import os, numpy; print(len(os.listdir('/proc/self/task')))"
    run = [subprocess.run([sys.executable, "-c", f"{c}\n{count}"], capture_output=True, text=True, timeout=120,
                          check=True, env={**base, **env}) for c in (code, "")]
    return int(run[0].stdout.split()[-1]), int(run[1].stdout.split()[-1])


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_command_starts_no_blas_thread_pool_unless_told():
    """numpy's BLAS would start a thread per core (each spinning ~0.1 s): a ddflow command keeps it
    at one, and a BLAS thread count set in the environment is kept."""
    import os

    command = "from ddflow.daemon.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    with_main, alone = blas_threads_after(command, {})
    assert with_main == 1
    if os.cpu_count() and os.cpu_count() > 1:
        assert alone > 1  # numpy alone starts its pool here: the comparison shows the difference
        told, _ = blas_threads_after(command, {"OPENBLAS_NUM_THREADS": "2"})
        assert told == 2


def test_a_command_asks_numpy_for_no_huge_pages_unless_told():
    """A ddflow command turns off numpy's request for transparent huge pages on large arrays (first
    touches that may stall in memory compaction); a setting in the environment is kept."""
    import os

    code = ("from ddflow.daemon.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "from numpy._core import multiarray\nprint(multiarray._get_madvise_hugepage())")
    base = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    asked = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                            env={**base, **env}).stdout.split()[-1] for env in ({}, {"NUMPY_MADVISE_HUGEPAGE": "1"})]
    assert asked == ["False", "True"]
