"""The library suites run with 1, 2 and 3 workers: a suite that uses the ``workers`` fixture (see
``library_streams.check_stream``) runs each example with the worker count ``DDFLOW_TEST_WORKERS`` selects
(see ``support.workers``: by default each example picks 1, 2 or 3 itself), and with the executor
``DDFLOW_TEST_EXECUTORS`` selects (see ``support.executors``: by default each example picks one)."""

from __future__ import annotations

import library_streams
import pytest

from support import executors
from support.workers import COUNTS, fixture_id


@pytest.fixture(params=executors.CHOICES, ids=executors.fixture_id, scope="module")
def executor(request):
    """The executor the suite's dataflows run with (``executors``: by default each example picks one)."""
    library_streams.EXECUTOR = request.param
    yield request.param
    library_streams.EXECUTOR = None


@pytest.fixture(params=COUNTS, ids=fixture_id, scope="module")
def workers(request, executor):
    library_streams.WORKERS = request.param
    yield request.param
    library_streams.WORKERS = 1
