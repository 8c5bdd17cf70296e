"""ddflow engine: differential dataflow over columnar numpy batches.

Collections are multisets that change at (partially ordered) times; operators keep their outputs
equal, at every complete time, to the operator applied to their accumulated inputs. The public API:

    from ddflow.operators import Dataflow
    df = Dataflow()
    edges = df.new_input("edges")
    probe = edges.collection.map(...).capture()
    edges.insert(record, time); edges.advance_to(time); df.run(); probe.at(time)

The names load on first use, so a light module of the package (``partition``, ``errors``) can be
imported without the engine's compiled kernels.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capture import Capture
    from .collection import Arranged, Collection
    from .dataflow import Dataflow
    from .errors import (
        CompactionError,
        DataflowError,
        DdflowError,
        DiffError,
        GraphError,
        IncompleteTimeError,
        ShapeError,
        TimeError,
    )
    from .frontier import Antichain, MutableAntichain
    from .input import InputSession

_HOMES = {
    "Antichain": ".frontier",
    "Arranged": ".collection",
    "Capture": ".capture",
    "CompactionError": ".errors",
    "Collection": ".collection",
    "Dataflow": ".dataflow",
    "DataflowError": ".errors",
    "DdflowError": ".errors",
    "DiffError": ".errors",
    "GraphError": ".errors",
    "IncompleteTimeError": ".errors",
    "InputSession": ".input",
    "MutableAntichain": ".frontier",
    "ShapeError": ".errors",
    "TimeError": ".errors",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
