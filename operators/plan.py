"""A dataflow's plan: its graph of operators lowered to tables of int64.

At the first ``run()`` the graph is fixed, and :func:`lower` derives from its scopes and nodes the
tables an executor steps through instead of walking Python objects: one row per node, in the order
the scopes run them (a scope's nodes are contiguous, inner scopes after their enclosing one), with

* ``kind``: what the node computes (:data:`KINDS`), and ``boundary``: 1 when a step runs a user
  Python function (a ``map`` or a join's record builder that is not a recognised column transform,
  ``filter``, ``flat_map``, ``inspect``, a reduction with user logic): the executor hands such a
  node its batch and resumes;
* ``transform``: the recognised column transform or built-in logic (:data:`TRANSFORMS`), 0 for none;
* ``scope``, ``ports``, ``observes`` (the node must see every new frontier), ``loop`` (a loop node's
  inner scope, else -1), ``arrangement`` (the trace an arrange or reduce node maintains, else -1);
* the edges, in CSR form both ways: ``consumer_start``/``consumer_node``/``consumer_port`` (where a
  node's output goes) and ``input_start``/``input_node`` (the producers of each of a node's input
  slots, ``input_port`` the slot);
* ``reads_start``/``reads``: the arrangements a join or reduce node reads, by port.

Scopes are rows of ``scope_depth``, ``scope_parent`` (-1 for the outer one), ``scope_loop`` (the loop
node, -1 for the outer one), ``scope_first``/``scope_count`` (their nodes' rows); arrangements are
rows of ``arrangement_node`` (the node maintaining the trace) and ``arrangement_by_self``.

The plan is derived, never edited: the nodes stay the handles users hold and the reference
implementation of each operator step; ``plan.nodes[i]`` is the node of row ``i``. :func:`check`
states what every plan satisfies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import Node, Scope

KINDS = ("other", "input", "concat", "negate", "map", "filter", "flat_map", "inspect", "consolidate", "enter",
         "feedback", "loop", "arrange", "join", "reduce", "exchange", "capture")
KIND = {name: code for code, name in enumerate(KINDS)}

# recognised column transforms and built-in logics (0: none, or a user function)
TRANSFORMS = ("none", "columns", "pairs", "count", "distinct", "threshold", "min", "max", "sum", "top_k")
TRANSFORM = {name: code for code, name in enumerate(TRANSFORMS)}

_CLASS_KIND = {"InputNode": "input", "Concat": "concat", "Negate": "negate", "Map": "map", "Filter": "filter",
               "FlatMap": "flat_map", "Inspect": "inspect", "Consolidate": "consolidate", "Enter": "enter",
               "Feedback": "feedback", "Loop": "loop", "Arrange": "arrange", "Join": "join", "Reduce": "reduce",
               "Exchange": "exchange", "Capture": "capture"}
_BOUNDARY = frozenset(("filter", "flat_map", "inspect"))


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


@dataclass(frozen=True, eq=False)
class Plan:
    """The tables of one dataflow's graph (see the module docstring); ``nodes[i]`` is row ``i``."""

    nodes: tuple[Node, ...]
    scopes: tuple[Scope, ...]
    kind: np.ndarray
    boundary: np.ndarray
    transform: np.ndarray
    scope: np.ndarray
    ports: np.ndarray
    observes: np.ndarray
    loop: np.ndarray
    arrangement: np.ndarray
    consumer_start: np.ndarray
    consumer_node: np.ndarray
    consumer_port: np.ndarray
    input_start: np.ndarray
    input_node: np.ndarray
    input_port: np.ndarray
    reads_start: np.ndarray
    reads: np.ndarray
    scope_depth: np.ndarray
    scope_parent: np.ndarray
    scope_loop: np.ndarray
    scope_first: np.ndarray
    scope_count: np.ndarray
    arrangement_node: np.ndarray
    arrangement_by_self: np.ndarray

    def row(self, node: Node) -> int:
        """The row of ``node``."""
        return self._rows[id(node)]

    @property
    def _rows(self) -> dict[int, int]:
        rows = self.__dict__.get("_row_of")
        if rows is None:
            rows = {id(n): i for i, n in enumerate(self.nodes)}
            object.__setattr__(self, "_row_of", rows)
        return rows

    def describe(self) -> str:
        """One line per node: row, scope, kind, transform, boundary, inputs and consumers."""
        lines = []
        for i, node in enumerate(self.nodes):
            ins = [f"{self.input_node[j]}" for j in range(self.input_start[i], self.input_start[i + 1])]
            outs = [f"{self.consumer_node[j]}:{self.consumer_port[j]}"
                    for j in range(self.consumer_start[i], self.consumer_start[i + 1])]
            lines.append(f"{i:3d} s{self.scope[i]} {KINDS[self.kind[i]]:<11s} {TRANSFORMS[self.transform[i]]:<9s}"
                         f"{'py ' if self.boundary[i] else '   '}{node.name:<24s} in {ins} out {outs}")
        return "\n".join(lines)


def _transform(kind: str, node: Node) -> tuple[int, bool]:
    """The node's recognised transform code and whether its step runs user Python."""
    if kind == "map":
        recognised = node.columns.shape is not None
        return TRANSFORM["columns" if recognised else "none"], not recognised or node.columns.items or node.columns.arith
    if kind == "join":
        python = getattr(node.output, "python", True)
        return TRANSFORM["none" if python else "pairs"], python
    if kind == "reduce":
        name = type(node.logic).__name__
        if name == "Threshold":
            user = getattr(node.logic, "f", None) is not None
            return TRANSFORM["threshold" if user else "distinct"], user
        if name == "Extremum":
            return TRANSFORM["max" if node.name == "max" else "min"], False
        code = {"Count": "count", "Sum": "sum", "TopK": "top_k"}.get(name)
        return (TRANSFORM[code], False) if code else (TRANSFORM["none"], True)
    return TRANSFORM["none"], kind in _BOUNDARY


def lower(root: Scope) -> Plan:
    """The plan of the graph under ``root`` (fixed: call it once the dataflow has started)."""
    scopes: list[Scope] = []
    nodes: list[Node] = []
    parents: list[int] = []
    todo: list[tuple[Scope, int]] = [(root, -1)]
    while todo:  # breadth-first: a scope's rows are contiguous, inner scopes after their enclosing one
        scope, parent = todo.pop(0)
        sid = len(scopes)
        scopes.append(scope)
        parents.append(parent)
        for node in scope.nodes:
            nodes.append(node)
            inner = getattr(node, "inner", None)
            if inner is not None:
                todo.append((inner, sid))
    row = {id(n): i for i, n in enumerate(nodes)}
    sid_of = {id(s): i for i, s in enumerate(scopes)}
    n = len(nodes)
    kind = np.zeros(n, dtype=np.int64)
    boundary = np.zeros(n, dtype=np.int64)
    transform = np.zeros(n, dtype=np.int64)
    loop = np.full(n, -1, dtype=np.int64)
    arrangement = np.full(n, -1, dtype=np.int64)
    arrangement_node, arrangement_by_self = [], []
    for i, node in enumerate(nodes):
        name = _CLASS_KIND.get(type(node).__name__, "other")
        kind[i] = KIND[name]
        code, python = _transform(name, node)
        transform[i], boundary[i] = code, int(python or name == "other")
        if name == "loop":
            loop[i] = sid_of[id(node.inner)]
        if name in ("arrange", "reduce"):
            arrangement[i] = len(arrangement_node)
            arrangement_node.append(i)
            arrangement_by_self.append(int(getattr(node, "by_self", False)))
    consumer_start, consumer_node, consumer_port = [0], [], []
    inputs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for i, node in enumerate(nodes):
        for consumer, port in node.consumers:
            consumer_node.append(row[id(consumer)])
            consumer_port.append(port)
            inputs[row[id(consumer)]].append((port, i))
        consumer_start.append(len(consumer_node))
    input_start, input_node, input_port = [0], [], []
    for slots in inputs:
        for port, producer in sorted(slots):
            input_port.append(port)
            input_node.append(producer)
        input_start.append(len(input_node))
    reads_start, reads = [0], []
    for i in range(n):  # the arrangements feeding a join's or reduce's ports
        if KINDS[kind[i]] in ("join", "reduce"):
            for j in range(input_start[i], input_start[i + 1]):
                if KINDS[kind[input_node[j]]] == "arrange":
                    reads.append(arrangement[input_node[j]])
        reads_start.append(len(reads))
    first, count, pos = [], [], 0
    for s in scopes:
        first.append(pos)
        count.append(len(s.nodes))
        pos += len(s.nodes)
    return Plan(
        nodes=tuple(nodes), scopes=tuple(scopes), kind=kind, boundary=boundary, transform=transform,
        scope=_i64([sid_of[id(node.scope)] for node in nodes]), ports=_i64([len(node.buffers) for node in nodes]),
        observes=_i64([int(node.observes_frontier) for node in nodes]), loop=loop, arrangement=arrangement,
        consumer_start=_i64(consumer_start), consumer_node=_i64(consumer_node), consumer_port=_i64(consumer_port),
        input_start=_i64(input_start), input_node=_i64(input_node), input_port=_i64(input_port),
        reads_start=_i64(reads_start), reads=_i64(reads),
        scope_depth=_i64([s.depth for s in scopes]), scope_parent=_i64(parents),
        scope_loop=_i64([-1 if s.loop is None else row[id(s.loop)] for s in scopes]),
        scope_first=_i64(first), scope_count=_i64(count),
        arrangement_node=_i64(arrangement_node), arrangement_by_self=_i64(arrangement_by_self))


def check(plan: Plan) -> None:
    """Raise ``AssertionError`` unless ``plan`` holds what every plan holds: each scope's rows are its
    nodes in order, every edge stays in one scope (a loop's egress edge aside: from the loop's body
    to the loop node, and a loop's ingress: from the enclosing scope to an ``enter`` node), inputs
    mirror consumers, and every table has a row per node or scope."""
    n = len(plan.nodes)
    for name in ("kind", "boundary", "transform", "scope", "ports", "observes", "loop", "arrangement"):
        assert len(getattr(plan, name)) == n, name
    for s, scope in enumerate(plan.scopes):
        first, count = int(plan.scope_first[s]), int(plan.scope_count[s])
        assert list(plan.nodes[first : first + count]) == scope.nodes
        assert (plan.scope[first : first + count] == s).all()
        assert plan.scope_depth[s] == scope.depth
        if plan.scope_parent[s] >= 0:
            assert plan.scope_depth[s] == plan.scope_depth[plan.scope_parent[s]] + 1
            assert plan.loop[plan.scope_loop[s]] == s
    pairs = {(int(p), int(c), int(port)) for p in range(n)
             for c, port in zip(plan.consumer_node[plan.consumer_start[p] : plan.consumer_start[p + 1]],
                                plan.consumer_port[plan.consumer_start[p] : plan.consumer_start[p + 1]])}
    mirrored = {(int(p), c, int(port)) for c in range(n)
                for p, port in zip(plan.input_node[plan.input_start[c] : plan.input_start[c + 1]],
                                   plan.input_port[plan.input_start[c] : plan.input_start[c + 1]])}
    assert pairs == mirrored
    for p, c, port in pairs:
        assert 0 <= port < plan.ports[c]
        same = plan.scope[p] == plan.scope[c]
        egress = plan.kind[c] == KIND["loop"] and plan.scope_loop[plan.scope[p]] == c
        ingress = plan.kind[c] == KIND["enter"] and plan.scope_parent[plan.scope[c]] == plan.scope[p]
        assert same or egress or ingress, (p, c)
