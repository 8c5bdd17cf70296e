"""The oracle suites run with 1, 2 and 3 workers: a suite that uses the ``workers`` fixture (see
``oracle_harness.check_pipeline``) runs each example with the worker count ``DDFLOW_TEST_WORKERS`` selects
(see ``support.workers``: by default each example picks 1, 2 or 3 itself), and with the executor
``DDFLOW_TEST_EXECUTORS`` selects (see ``support.executors``: by default each example picks one)."""

from __future__ import annotations

import oracle_harness
import pytest

from support import executors
from support.workers import COUNTS, fixture_id


@pytest.fixture(params=executors.CHOICES, ids=executors.fixture_id, scope="module")
def executor(request):
    """The executor the suite's dataflows run with (``executors``: by default each example picks one)."""
    oracle_harness.EXECUTOR = request.param
    yield request.param
    oracle_harness.EXECUTOR = None


@pytest.fixture(params=COUNTS, ids=fixture_id, scope="module")
def workers(request, executor):
    oracle_harness.WORKERS = request.param
    yield request.param
    oracle_harness.WORKERS = 1
