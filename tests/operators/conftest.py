"""The oracle suites run with 1, 2 and 3 workers: a suite that uses the ``workers`` fixture (see
``oracle_harness.check_pipeline``) runs each of its tests once per worker count; ``DDFLOW_TEST_WORKERS``
(default ``1,2,3``) picks the counts."""

from __future__ import annotations

import os

import oracle_harness
import pytest

COUNTS = [int(w) for w in os.environ.get("DDFLOW_TEST_WORKERS", "1,2,3").split(",") if w.strip()]


@pytest.fixture(params=COUNTS, ids=lambda w: f"{w}w", scope="module")
def workers(request):
    oracle_harness.WORKERS = request.param
    yield request.param
    oracle_harness.WORKERS = 1
