"""The oracle suites run with 1, 2 and 3 workers: a suite that uses the ``workers`` fixture (see
``oracle_harness.check_pipeline``) runs each of its tests once per worker count."""

from __future__ import annotations

import oracle_harness
import pytest


@pytest.fixture(params=[1, 2, 3], ids=lambda w: f"{w}w", scope="module")
def workers(request):
    oracle_harness.WORKERS = request.param
    yield request.param
    oracle_harness.WORKERS = 1
