"""ddflow engine: differential dataflow over columnar numpy batches.

Collections are multisets that change at (partially ordered) times; operators keep their outputs
equal, at every complete time, to the operator applied to their accumulated inputs. The public API:

    from ddflow.operators import Dataflow
    df = Dataflow()
    edges = df.new_input("edges")
    probe = edges.collection.map(...).capture()
    edges.insert(record, time); edges.advance_to(time); df.run(); probe.at(time)
"""

from .capture import Capture
from .collection import Collection
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
from .nodes.arrange import Arranged

__all__ = [
    "Antichain",
    "Arranged",
    "Capture",
    "CompactionError",
    "Collection",
    "Dataflow",
    "DataflowError",
    "DdflowError",
    "DiffError",
    "GraphError",
    "IncompleteTimeError",
    "InputSession",
    "MutableAntichain",
    "ShapeError",
    "TimeError",
]
