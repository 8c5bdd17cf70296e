"""Fixtures for the backfill tests: one local Spark session per test module (starting Spark takes
~15 s); the broker fixtures come from ``support.broker``."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from ddflow.daemon.state.backfill import spark_session

    session = spark_session("local[2]", app_name="ddflow-backfill-tests",
                            conf={"spark.sql.shuffle.partitions": "4"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
