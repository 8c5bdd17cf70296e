"""Plain-Python references for the library's dataflows, computed from scratch on one snapshot.

A snapshot is a ``{record: multiplicity}`` dict (as ``accumulate`` returns it); a graph snapshot holds
``(src, dst)`` edges, and only edges with positive multiplicity exist. Each reference returns the
``{record: multiplicity}`` the matching dataflow must show at that time. Reachability's reference
is shared with other suites: `support.oracles.reachable_pairs`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

from support.oracles import Snapshot, adjacency


def component_labels(edges: Snapshot) -> Snapshot:
    """Union-find over the edges read both ways: ``{(node, least node of its component): 1}``."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (src, dst), count in edges.items():
        if count > 0:
            a, b = find(src), find(dst)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the root of a set is its least node
    return {(node, find(node)): 1 for node in list(parent)}


def strong_components(edges: Snapshot) -> dict[int, int]:
    """Tarjan's algorithm (iterative): ``{node: component number}`` for every endpoint."""
    adjacent = adjacency(edges)
    nodes = sorted({n for (s, d), c in edges.items() if c > 0 for n in (s, d)})
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    component: dict[int, int] = {}
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = adjacent.get(node, [])
            if child < len(successors):
                work.append((node, child + 1))
                nxt = successors[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = node
                    if member == node:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return component


def scc_edges(edges: Snapshot) -> Snapshot:
    """The edges whose ends share a strongly connected component, with their multiplicities."""
    component = strong_components(edges)
    return {
        (src, dst): count
        for (src, dst), count in edges.items()
        if count > 0 and component[src] == component[dst]
    }


def interned(records: Snapshot, hasher: Callable[[tuple], int]) -> Snapshot:
    """Collision rounds run synchronously to a fixed point: in every hash group of ``(round, record)``
    pairs the least pair keeps its place and the others move to the next round.
    ``{(record, hasher((round, record))): multiplicity}``."""
    rounds = {record: 0 for record, count in records.items() if count != 0}
    while True:
        groups: dict[int, list[tuple[int, Hashable]]] = defaultdict(list)
        for record, round_ in rounds.items():
            groups[hasher((round_, record))].append((round_, record))
        moved = False
        for group in groups.values():
            group.sort()
            for round_, record in group[1:]:
                rounds[record] = round_ + 1
                moved = True
        if not moved:
            return {(record, hasher((round_, record))): records[record] for record, round_ in rounds.items()}
