"""From-scratch references that several suites share.

A snapshot is a ``{record: multiplicity}`` dict (as ``accumulate`` returns it); a graph snapshot
holds ``(src, dst)`` edges, and only edges with a positive multiplicity exist. The sliding-window
workload itself is `ddflow.operators.testing.window_edges` (its edge list) and
`ddflow.operators.testing.sliding_window_graph` (its updates), so the tests, the benchmarks and the
engine's own helpers use one formula.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Mapping

Snapshot = dict[Hashable, int]

__all__ = ["Snapshot", "adjacency", "reachable", "reachable_pairs"]


def adjacency(edges: Mapping[tuple[int, int], int]) -> dict[int, list[int]]:
    """Each node's successors over the edges with a positive multiplicity."""
    out: dict[int, list[int]] = defaultdict(list)
    for (src, dst), count in edges.items():
        if count > 0:
            out[src].append(dst)
    return out


def reachable(edges: Mapping[tuple[int, int], int], roots: Iterable[int]) -> set[int]:
    """Breadth-first search: every node reachable from any of ``roots`` (the roots included)."""
    successors = adjacency(edges)
    seen = set(roots)
    queue = deque(seen)
    while queue:
        for nxt in successors.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def reachable_pairs(roots: Snapshot, edges: Snapshot) -> Snapshot:
    """Breadth-first search from every present root: ``{(root, node): 1}``."""
    return {(root, node): 1 for root, count in roots.items() if count > 0 for node in reachable(edges, [root])}
