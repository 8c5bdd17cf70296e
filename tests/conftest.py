"""Settings for the whole test session: the shared support modules (see tests/support) and the
compiled kernels."""

from __future__ import annotations

import pytest

pytest_plugins = ["support.profiles", "support.broker", "support.kcat", "support.daemons"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kernels", choices=("compiled", "python"), default="compiled",
                     help="python: every kernel runs as its Python twin (the first tier of a cold start), "
                          "compiling nothing; the kernels' property tests then hold the twins to the references")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--kernels") == "python":
        skip = pytest.mark.skip(reason="needs the kernels compiled; --kernels python runs them as Python")
        for item in items:
            if "compiles" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels(request: pytest.FixtureRequest) -> None:
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

    if request.config.getoption("--kernels") == "python":
        from ddflow.daemon.cli.commands import KERNEL_PACKAGES, kernel_jobs
        from ddflow.operators.kernels.interpreted import interpret

        interpret(kernel_jobs(), KERNEL_PACKAGES)
        return
    compile_kernels()
    warm.import_all()
    warm.workload()
    warm.edge_cases()
