"""The engine's public names are pinned: changing them is a deliberate, visible act."""

from __future__ import annotations

import ddflow.operators as ops


def test_public_names_are_pinned() -> None:
    assert sorted(ops.__all__) == sorted([
        "Antichain", "Arranged", "Capture", "Collection", "CompactionError", "Dataflow", "DataflowError",
        "DiffError", "GraphError", "IncompleteTimeError", "InputSession", "MutableAntichain", "ShapeError",
        "TimeError",
    ])
    for name in ops.__all__:
        assert getattr(ops, name) is not None


def test_every_engine_error_derives_from_the_root() -> None:
    for name in ("CompactionError", "DiffError", "GraphError", "IncompleteTimeError", "ShapeError", "TimeError"):
        assert issubclass(getattr(ops, name), ops.DataflowError)
