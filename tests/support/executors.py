"""Which executor the oracle and library suites run their dataflows with.

``DDFLOW_TEST_EXECUTORS`` (default ``mixed``):

* ``mixed``: each test runs once and every example picks ``nodes`` (the reference executor) or
  ``plan`` from the example itself (``name_for``), so one run covers both at the cost of about one;
* a comma list such as ``nodes,plan``: each test runs once per listed executor with all its examples
  (the thorough setting).

``tests/operators/test_executors.py`` holds the two executors to each other on the same streams
whatever this says.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

NAMES = ("nodes", "plan")
SPEC = os.environ.get("DDFLOW_TEST_EXECUTORS", "").strip() or "mixed"
# the suites' ``executor`` fixture parameters: None means "mixed"
CHOICES: list[str | None] = [None] if SPEC == "mixed" else [n.strip() for n in SPEC.split(",") if n.strip()]


def fixture_id(name: str | None) -> str:
    return "mixed-executors" if name is None else name


def name_for(setting: str | None, key: int) -> str:
    """The executor an example runs with: ``setting`` when fixed, else one picked by ``key`` (a
    number the example determines, so a failing example replays with its executor; a different digit
    of it than the worker count's)."""
    return NAMES[(key // 3) % len(NAMES)] if setting is None else setting


def config(base: Any, name: str, key: int = 0) -> Any:
    """``base`` (an ``EngineConfig`` or None for the default) with the executor ``name``, and the
    example's :func:`varied` knobs."""
    from ddflow.operators.tuning import EngineConfig

    return varied(dataclasses.replace(base if base is not None else EngineConfig(), executor=name), key)


def varied(config: Any, key: int) -> Any:
    """``config`` with the paths small examples would not take, each in every second example by a
    digit of ``key`` of its own (knobs the caller set are kept): reductions keep the histories of
    rounds of any size (``reduce_history_keys=1``), and, with the plan executor, each loop round's
    joins and reductions merge their traces' round batches during the epoch (``round_merge_updates=1``:
    the path only rounds of 65,536 updates take by default)."""
    from ddflow.operators.tuning import EngineConfig

    default = EngineConfig()
    if key % 2 and config.reduce_history_keys == default.reduce_history_keys:
        config = dataclasses.replace(config, reduce_history_keys=1)
    if config.executor == "plan" and (key // 9) % 2 and config.round_merge_updates == default.round_merge_updates:
        config = dataclasses.replace(config, round_merge_updates=1)
    return config
