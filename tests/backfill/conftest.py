"""Fixtures for the backfill tests: the session broker, fresh topics, and one local Spark session
per test module (starting Spark takes ~15 s)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka_broker import kafka_broker, kafka_options, make_topic  # noqa: E402,F401


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from ddflow.daemon.state.backfill import spark_session

    session = spark_session("local[2]", app_name="ddflow-backfill-tests",
                            conf={"spark.sql.shuffle.partitions": "4"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
