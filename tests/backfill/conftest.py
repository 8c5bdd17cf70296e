"""Fixtures for the backfill tests: one local Spark session for all the backfill modules, stopped
after the last backfill test; the broker fixtures come from ``support.broker``.

The backfill keeps nothing in the session between calls (no cached tables, views or settings), so
the modules share it without seeing each other's work.

Spark's JVMs here (this session's, and those of the ``ddflow backfill`` commands the tests run, which
inherit the environment) compile with the JIT's first tier only and serve no web UI: a JVM that
lives for a few small jobs spends most of its start-up in the optimising compiler, and the two
take a start from ~21 to ~8 CPU seconds (the stage progress the backfill prints comes from Spark's
status tracker, which needs no UI).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      "--driver-java-options -XX:TieredStopAtLevel=1 --conf spark.ui.enabled=false pyspark-shell")

HERE = Path(__file__).parent
_shared: list[Any] = []  # the running session, if any


@pytest.fixture(scope="module")
def spark():
    if not _shared:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from ddflow.daemon.state.backfill import spark_session

        session = spark_session("local[2]", app_name="ddflow-backfill-tests",
                                conf={"spark.sql.shuffle.partitions": "4"})
        session.sparkContext.setLogLevel("ERROR")
        _shared.append(session)
    return _shared[0]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared session once the next test is not a backfill test (its JVM would otherwise
    hold a gigabyte and wake up for the rest of the run); a later backfill test starts another."""
    if _shared and (nextitem is None or HERE not in Path(nextitem.path).parents):
        _shared.pop().stop()
