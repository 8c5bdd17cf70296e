"""Settings for the whole test session: the shared support modules (see tests/support) and the
compiled kernels."""

from __future__ import annotations

import pytest

pytest_plugins = ["support.profiles", "support.broker", "support.kcat", "support.daemons"]


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    """Compile every kernel once, before the first test, into numba's on-disk cache (in each of the
    suite's processes; processes started together compile once, the others wait and load): first what a
    first ``ddflow run`` compiles (the engine's and the codec's kernels missing from the cache, in
    parallel processes, one per CPU: on a fresh clone that halves the wait on two cores), then what
    ``python -m ddflow.operators.kernels.warm`` runs for an install, which loads them and compiles
    any specialisation the list lacks. The daemons tests start as subprocesses then load the
    kernels instead of compiling their own, which on a fresh clone and a busy machine can outlast a
    test's readiness deadline."""
    from ddflow.daemon.cli.commands import compile_kernels
    from ddflow.operators.kernels import warm

    compile_kernels()
    warm.import_all()
    warm.workload()
    warm.edge_cases()
