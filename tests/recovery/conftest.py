"""Fixtures for the recovery tests: the session broker and fresh topics (see tests/kafka_broker.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_broker import kafka_broker, kafka_options, make_topic  # noqa: E402,F401
