"""The engine's public names are pinned: changing them is a deliberate, visible act."""

from __future__ import annotations

import ddflow.operators as ops


def test_public_names_are_pinned() -> None:
    assert sorted(ops.__all__) == sorted([
        "Antichain", "Arranged", "Capture", "Collection", "CompactionError", "Dataflow", "DataflowError",
        "DdflowError",
        "DiffError", "GraphError", "IncompleteTimeError", "InputSession", "MutableAntichain", "ShapeError",
        "TimeError",
    ])
    for name in ops.__all__:
        assert getattr(ops, name) is not None


def test_every_engine_error_derives_from_the_root() -> None:
    for name in ("CompactionError", "DiffError", "GraphError", "IncompleteTimeError", "ShapeError", "TimeError"):
        assert issubclass(getattr(ops, name), ops.DataflowError)


def test_every_public_name_says_what_it_means() -> None:
    """Each public class and function of the engine and its library, and each public method and property
    of those classes, has a docstring."""
    import inspect

    import ddflow.operators.library as library

    missing = []
    for module in (ops, library):
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not obj.__module__.startswith("ddflow"):
                continue
            if not inspect.getdoc(obj):
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    f = value.fget if isinstance(value, property) else value
                    if not member.startswith("_") and inspect.isfunction(f) and not f.__doc__:
                        missing.append(f"{module.__name__}.{name}.{member}")
    assert not missing, missing
