"""A dataflow: inputs, the graph of operators between them, and the scheduler that drives it.

``run()`` computes the input frontier (the least of every open input's frontier; closed inputs do not
hold it back) and steps the outer scope's nodes in order — repeatedly, while any node still holds work
at a complete time — so when it returns every update at a complete time has been processed. Nothing
waits or polls: the work to do is exactly what the frontiers allow.
"""

from __future__ import annotations

from typing import Any

from .collection import Collection
from .context import Context
from .errors import GraphError
from .executor import PlanExecutor
from .frontier import Antichain
from .graph import Scope
from .input import InputNode, InputSession
from .plan import lower
from .tuning import DEFAULT, EngineConfig
from .values import sweep


class Dataflow:
    """The graph of a differential computation and its single-worker scheduler.

    ``config`` is the :class:`~ddflow.operators.tuning.EngineConfig` of its tuning knobs."""

    def __init__(self, *, config: EngineConfig | None = None) -> None:
        config = DEFAULT if config is None else config
        if not isinstance(config, EngineConfig):
            raise GraphError(f"Dataflow(config=...) takes an EngineConfig, got {type(config).__name__}")
        self.context = Context(config)
        self.root = Scope(self.context, 1)
        self.inputs: dict[str, InputSession] = {}
        self.epochs = 0
        self._spines: list | None = None
        self._executor: PlanExecutor | None = None

    @property
    def config(self) -> EngineConfig:
        """The tuning knobs this dataflow was built with."""
        return self.context.tuning

    @property
    def interner(self):
        """Values <-> ids for every record of this dataflow."""
        return self.context.interner

    @property
    def started(self) -> bool:
        """True once the dataflow first ran: the graph cannot change any more."""
        return self.context.started

    @property
    def worker(self) -> Any:
        """The :class:`~ddflow.operators.workers.Worker` this dataflow is when several share it (set
        by ``ddflow.operators.workers`` before the graph is built: exchanges go before arrangements
        and ``run`` agrees with the others), else ``None``."""
        return self.context.worker

    @worker.setter
    def worker(self, worker: Any) -> None:
        self.context.worker = worker

    def new_input(self, name: str | None = None) -> InputSession:
        """A new input session named ``name`` (unique in this dataflow), whose ``collection`` operators read."""
        name = name or f"input{len(self.inputs)}"
        if name in self.inputs:
            raise GraphError(f"an input named {name!r} already exists")
        node = InputNode(self.root, name)
        session = InputSession(node, Collection(node))
        self.inputs[name] = session
        return session

    @property
    def frontier(self) -> Antichain:
        """The meet of the open inputs' frontiers (empty when every input is closed)."""
        times = [s.time for s in self.inputs.values() if s.time is not None]
        return Antichain([(min(times),)]) if times else Antichain()

    def run(self) -> None:
        """Do all the work the input frontiers allow, then return. As one of several workers, the
        frontier is the meet of every worker's and passes repeat while any worker has work."""
        self.context.started = True
        worker = self.context.worker
        frontier = self.frontier if worker is None else worker.common_frontier(self.frontier)
        if self.context.tuning.executor == "plan":
            if self._executor is None:  # the graph is fixed once running
                self._executor = PlanExecutor(lower(self.root), worker)
            self._executor.run(frontier)
        else:
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
        if sweep.due(self.context.interner, self.context.tuning):  # a safe point: no batch in flight
            sweep.sweep(self.context.interner, self._all_nodes())
        self.epochs += 1

    def arrangement_stats(self) -> dict[str, dict[str, int]]:
        """Sizes of every trace: ``{name: {"records", "batches", "bytes", "merge_work"}}``, named as
        ``Collection.name`` says (``views.by_key``, ``map(parse_view).by_key``, ``count.output``);
        a name repeated in the graph is numbered from its second occurrence on, in graph order
        (``count.output#2``), the same on every run of the same graph."""
        pairs = [(name, spine) for node in self._all_nodes() for name, spine in node.arrangements()]
        return {name: spine.stats() for name, spine in _numbered(pairs)}

    def operator_stats(self) -> dict[str, dict[str, int]]:
        """Per operator that remembers its user function's results (``map``, ``filter``):
        ``{label: {"memo_records", "memo_bytes"}}``, the distinct records whose results it holds
        and their bytes, named and numbered as ``arrangement_stats`` names arrangements."""
        pairs = [(node.label, node.memo) for node in self._all_nodes() if getattr(node, "memo", None) is not None]
        return {label: {"memo_records": len(memo), "memo_bytes": memo.nbytes()} for label, memo in _numbered(pairs)}

    def _all_nodes(self):
        stack = [self.root]
        while stack:
            scope = stack.pop()
            for node in scope.nodes:
                yield node
                inner = getattr(node, "inner", None)
                if inner is not None:
                    stack.append(inner)


def _numbered(pairs):
    """``(name, value)`` pairs with each repeated name numbered from its second occurrence on
    (``name#2``, ``name#3``), skipping numbers that are names already."""
    taken = {name for name, _ in pairs}
    seen: dict[str, int] = {}
    for name, value in pairs:
        n = seen.get(name, 0) + 1
        seen[name] = n
        if n > 1:
            while f"{name}#{n}" in taken:
                n += 1
            seen[name] = n
            name = f"{name}#{n}"
            taken.add(name)
        yield name, value
