"""Settings for the whole test session: the shared support modules (see tests/support) and the
compiled kernels."""

from __future__ import annotations

import pytest

pytest_plugins = ["support.profiles", "support.broker", "support.kcat", "support.daemons"]


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    """Compile every kernel once, before the first test, into numba's on-disk cache (what
    ``python -m ddflow.operators.kernels.warm`` does for an install): the daemons tests start as
    subprocesses then load the kernels instead of compiling their own, which on a fresh clone and a
    busy machine can outlast a test's readiness deadline."""
    from ddflow.operators.kernels import warm

    warm.import_all()
    warm.workload()
    warm.edge_cases()
