"""The library suites run with 1, 2 and 3 workers: a suite that uses the ``workers`` fixture (see
``library_streams.check_stream``) runs each of its tests once per worker count."""

from __future__ import annotations

import library_streams
import pytest


@pytest.fixture(params=[1, 2, 3], ids=lambda w: f"{w}w", scope="module")
def workers(request):
    library_streams.WORKERS = request.param
    yield request.param
    library_streams.WORKERS = 1
