"""A dataflow: inputs, the graph of operators between them, and the scheduler that drives it.

``run()`` computes the input frontier (the least of every open input's frontier; closed inputs do not
hold it back) and steps the outer scope's nodes in order — repeatedly, while any node still holds work
at a complete time — so when it returns every update at a complete time has been processed. Nothing
waits or polls: the work to do is exactly what the frontiers allow.
"""

from __future__ import annotations

from .collection import Collection
from .config import DEFAULT, EngineConfig
from .errors import GraphError
from .frontier import Antichain
from .graph import Scope
from .input import InputNode, InputSession
from .values import sweep
from .values.interner import Interner


class Dataflow:
    """The graph of a differential computation and its single-worker scheduler."""

    def __init__(self, *, config: EngineConfig | None = None) -> None:
        self.config = DEFAULT if config is None else config
        if not isinstance(self.config, EngineConfig):
            raise GraphError(f"Dataflow(config=...) takes an EngineConfig, got {type(config).__name__}")
        self.interner = Interner(memo_limit=self.config.memo_limit)
        self.started = False
        self.root = Scope(self, 1)
        self.inputs: dict[str, InputSession] = {}
        self._arrangement_names: dict[str, int] = {}
        self.epochs = 0
        self._spines: list | None = None
        # set by ``ddflow.operators.workers`` before the graph is built when this dataflow is one of
        # several workers: exchanges go before arrangements and ``run`` agrees with the others
        self.worker = None

    def new_input(self, name: str | None = None) -> InputSession:
        """A new input session named ``name`` (unique in this dataflow), whose ``collection`` operators read."""
        name = name or f"input{len(self.inputs)}"
        if name in self.inputs:
            raise GraphError(f"an input named {name!r} already exists")
        node = InputNode(self.root, name)
        session = InputSession(node, Collection(node))
        self.inputs[name] = session
        return session

    def name_arrangement(self, kind: str) -> str:
        """A fresh name for an arrangement of ``kind`` (``arrange0``, ``arrange1``, ...)."""
        n = self._arrangement_names.get(kind, 0)
        self._arrangement_names[kind] = n + 1
        return f"{kind}{n}"

    @property
    def frontier(self) -> Antichain:
        """The meet of the open inputs' frontiers (empty when every input is closed)."""
        times = [s.time for s in self.inputs.values() if s.time is not None]
        return Antichain([(min(times),)]) if times else Antichain()

    def run(self) -> None:
        """Do all the work the input frontiers allow, then return. As one of several workers, the
        frontier is the meet of every worker's and passes repeat while any worker has work."""
        self.started = True
        worker = self.worker
        frontier = self.frontier if worker is None else worker.common_frontier(self.frontier)
        while True:
            self.root.step(frontier)
            more = self.root.complete_work(frontier)
            if worker is not None:
                more = worker.any(more)
            if not more:
                break
        if self._spines is None:  # the graph is fixed once running
            self._spines = [spine for node in self._all_nodes() for _, spine in node.arrangements()]
        for spine in self._spines:
            spine.exert()
        if sweep.due(self):  # a safe point: no batch in flight
            sweep.sweep(self)
        self.epochs += 1

    def arrangement_stats(self) -> dict[str, dict[str, int]]:
        """Sizes of every trace: ``{name: {"records", "batches", "bytes", "merge_work"}}``."""
        stats = {}
        for node in self._all_nodes():
            for name, spine in node.arrangements():
                stats[name] = spine.stats()
        return stats

    def _all_nodes(self):
        stack = [self.root]
        while stack:
            scope = stack.pop()
            for node in scope.nodes:
                yield node
                inner = getattr(node, "inner", None)
                if inner is not None:
                    stack.append(inner)
