"""How many workers the oracle and library suites share a dataflow among.

``DDFLOW_TEST_WORKERS`` (default ``mixed``):

* ``mixed``: each test runs once and every example picks its own count, 1, 2 or 3, from the example
  itself (``count_for``), so one run covers every count at the cost of about one;
* a comma list such as ``1,2,3``: each test runs once per listed count with all its examples (the
  thorough setting; ``1`` alone for a quick local run).
"""

from __future__ import annotations

import os

SPEC = os.environ.get("DDFLOW_TEST_WORKERS", "").strip() or "mixed"
MIXED = (1, 2, 3)
# the suites' ``workers`` fixture parameters: None means "mixed"
COUNTS: list[int | None] = [None] if SPEC == "mixed" else [int(w) for w in SPEC.split(",") if w.strip()]


def fixture_id(count: int | None) -> str:
    return "mixed" if count is None else f"{count}w"


def count_for(setting: int | None, key: int) -> int:
    """The workers an example runs with: ``setting`` when fixed, else one of ``MIXED`` picked by
    ``key`` (a number the example determines, so a failing example replays with its count)."""
    return MIXED[key % len(MIXED)] if setting is None else setting
