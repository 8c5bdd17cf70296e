"""What every scope and node of one dataflow shares, handed down instead of the dataflow itself.

A node needs a few things of the dataflow it belongs to: the interner that gives its records ids,
the tuning knobs, the worker it runs as (when several share the dataflow), fresh names for the
arrangements it makes, and whether the graph is still being built. The :class:`Context` holds
exactly those; the :class:`~ddflow.operators.dataflow.Dataflow` makes one and hands it to its root
scope, and each loop hands it to its inner scope. Nodes never reach back to the dataflow: the
dataflow is above the graph, the context below it.
"""

from __future__ import annotations

from typing import Any

from .tuning import EngineConfig
from .values.interner import Interner


class Context:
    """The interner, tuning, worker and names of one dataflow's graph.

    * ``interner``: values <-> ids for every record of the dataflow.
    * ``tuning``: the :class:`~ddflow.operators.tuning.EngineConfig` the dataflow was built with.
    * ``worker``: the :class:`~ddflow.operators.workers.Worker` this dataflow is, when several share
      it (set before the graph is built: exchanges go before arrangements), else ``None``.
    * ``started``: true once the dataflow first ran; the graph may not change after that.
    * ``quarantine``: where user functions' failures go (``None``: every failure stops the run).
    * ``in_round``: true while an executor runs a pass of a loop's round that the loop's closing
      pass will follow (the plan executor sets it; the reference never does): a node may then leave
      what only the frontier asks of it, such as moving its trace handles' compaction, to that pass.
    """

    __slots__ = ("interner", "tuning", "worker", "started", "in_round", "quarantine", "_names", "_labels")

    def __init__(self, tuning: EngineConfig) -> None:
        self.tuning = tuning
        self.interner = Interner(memo_limit=tuning.memo_limit)
        self.worker: Any = None
        self.started = False
        self.quarantine: Any = None  # user functions' failures under dead_letter (`nodes.calls.Quarantine`)
        self.in_round = False
        self._names: dict[str, int] = {}
        self._labels: dict[str, int] = {}

    def label(self, label: str) -> str:
        """``label`` the first time it is asked for, then ``label#2``, ``label#3``, ...: the
        operators' labels in metrics (``map(parse_view)``, a collection's name) stay apart."""
        n = self._labels.get(label, 0) + 1
        self._labels[label] = n
        return label if n == 1 else f"{label}#{n}"

    def name_arrangement(self, kind: str) -> str:
        """A fresh name for an arrangement of ``kind`` (``arrange0``, ``arrange1``, ...)."""
        n = self._names.get(kind, 0)
        self._names[kind] = n + 1
        return f"{kind}{n}"
