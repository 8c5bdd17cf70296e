"""A library of dataflows built only from the public collection API: graph reachability, connected
components, strongly connected components, and interning (unique ids for records).

Each function takes collections and returns a collection whose contents, at every complete time, are
a function of the inputs accumulated at that time:

- ``reachability(roots, edges)``: ``(root, node)`` for every ``node`` reachable from a present
  ``root`` along edges ``(src, dst)`` (the 2016 roadmap's program), multiplicity 1.
- ``connected_components(edges)``: ``(node, label)`` with ``label`` the least node of the node's
  undirected component, by min-label propagation (the CIDR 2013 paper, section 2 and figure 7).
- ``scc(edges)``: the edges ``(src, dst)`` whose ends lie in one strongly connected component, with
  their input multiplicity; a loop around two directed label propagations (the paper's figure 8).
- ``intern(collection)``: ``(record, id)`` with ids unique among the present records, found by hashing
  ``(round, record)`` and moving collision losers to the next round, in the diff-based form of the
  2018 string-interning post (the loop develops only the changes to round zero).
- ``tumbling_windows(c, width)``, ``sliding_windows(c, size, period)``, ``session_windows(c, gap)``:
  ``(start, record)`` for the windows ``[start, end)`` of nanosecond times that contain each update's
  time, retracted at the window's end (:mod:`ddflow.operators.nodes.windows` defines them precisely;
  they are the one part of the library built on nodes of its own, since the collection API does not
  read times).

Graph inputs are multisets of ``(src, dst)`` edges with non-negative multiplicities; node ids and
interned records need a Python ordering (labels are least nodes; collision winners least pairs).
User functions here are deterministic, as the engine requires.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .collection import Collection
from .nodes.intern import FULL, Intern
from .nodes.windows import session_windows, sliding_windows, tumbling_windows
from .partition import key_hash

__all__ = ["connected_components", "intern", "reachability", "scc", "session_windows", "sliding_windows", "stable_hash",
           "tumbling_windows"]

ID_MASK = (1 << 63) - 1


def _swap(pair: tuple) -> tuple:
    return pair[1], pair[0]


# -- reachability ---------------------------------------------------------------------------------
def reachability(roots: Collection, edges: Collection) -> Collection:
    """``(root, node)`` pairs: ``node`` is reachable from the root ``root`` along ``edges``.

    The roadmap's program, with the loop variable keyed by node (``(node, root)``) so that it joins
    the edges ``(src, dst)`` by source without re-keying each round:
    ``reach = distinct({(root, root)} ∪ {(dst, root) : (node, root) ∈ reach, (node, dst) ∈ edges})``.
    """
    start = roots.map(lambda root: (root, root))

    def expand(reach: Collection) -> Collection:
        return reach.join_map(edges, lambda _node, root, dst: (dst, root)).concat(start).distinct()

    return start.iterate(expand).map(_swap)


# -- connected components -------------------------------------------------------------------------
def _propagate(seeds: Collection, edges: Collection) -> Collection:
    """``(node, label)``: the least seed label reaching ``node`` along directed ``edges``.

    The paper's ``LocalMin`` iterated to a fixed point: each round joins the labels with the edges
    by source, offers each label to the destination, and keeps the least offer per node. The seeds
    are concatenated in every round (rather than the previous labels: the fixed point is the same,
    and the seeds enter the loop once, at iteration zero).

    The seeds enter with multiplicity one: the least seed label per node (its one label; ``min``
    gives every label multiplicity one, and keeps ``(node, label)`` pairs as two columns where
    ``distinct`` would intern each pair). Made from the edges, a node's seed counts its edges, and
    every change of that count would be offered to each of the node's neighbours at iteration zero:
    a change at a hub of degree 16,000 would make 16,000 offers that change no label."""
    seeds = seeds.min()

    def local_min(labels: Collection) -> Collection:
        offers = labels.join_map(edges, lambda _node, label, dst: (dst, label))
        return offers.concat(seeds).min()

    return seeds.iterate(local_min)


def connected_components(edges: Collection) -> Collection:
    """``(node, label)`` for every endpoint of ``edges``: ``label`` is the least node connected to it
    when edges are read in both directions (min-label propagation)."""
    symmetric = edges.concat(edges.map(_swap))
    seeds = symmetric.map(lambda e: (e[0], e[0]))
    return _propagate(seeds, symmetric)


# -- strongly connected components ----------------------------------------------------------------
def _trim_and_reverse(edges: Collection) -> Collection:
    """The edges whose two ends get the same directed label, reversed (the paper's TrimAndReverse).

    Labels are seeded at every destination with the node itself, so ``label(v)`` is the least node
    with a path to ``v`` (the figure seeds sources only, which would keep a lone edge ``a -> b``
    forever: both ends would be labelled ``a``, then ``b`` once reversed). A node without incoming
    edges has no label and its out-edges are dropped: it lies on no cycle."""
    seeds = edges.map(lambda e: (e[1], e[1]))
    labels = _propagate(seeds, edges).arrange_by_key()
    by_dst = edges.join_map(labels, lambda src, dst, label: (dst, (src, label)))
    return by_dst.join_map(
        labels, lambda dst, src_label, label: (dst, src_label[0]) if label == src_label[1] else None
    ).filter(lambda edge: edge is not None)


def scc(edges: Collection) -> Collection:
    """The edges ``(src, dst)`` of ``edges`` whose ends are in the same strongly connected component
    (with their multiplicities): ``edges.iterate(y -> trim_and_reverse(trim_and_reverse(y)))``, a
    doubly nested loop. Trimming keeps every edge inside a component (its ends reach each other, so
    they are reached by the same nodes) and, at the fixed point, no other."""
    return edges.iterate(lambda y: _trim_and_reverse(_trim_and_reverse(y)))


# -- interning ------------------------------------------------------------------------------------
stable_hash = key_hash  # the engine's one stable hash (``ddflow.operators.partition``), 63 bits


class StableHashModulo:
    """The hasher ``stable_hash(pair) % modulus``: ``intern`` computes it in bulk, as it does
    ``stable_hash`` (a small modulus makes collisions common: the tests use it)."""

    def __init__(self, modulus: int) -> None:
        if type(modulus) is not int or not 1 <= modulus <= FULL:
            raise ValueError(f"modulus must be an int in 1..2**63, got {modulus!r}")
        self.modulus = modulus

    def __call__(self, pair: tuple) -> int:
        return stable_hash(pair) % self.modulus

    def __repr__(self) -> str:
        return f"StableHashModulo({self.modulus})"


def _resolve(hasher: Callable[[tuple], int]) -> Callable:
    """Reduce logic on a hash group of ``(round, record)`` pairs (accumulated: round zero plus the
    changes found so far): the least pair keeps its hash, every other one moves to the next round.
    Returns changes relative to round zero as hashed pairs ``(hash, (round, record))``:
    ``-(hash, (0, record))`` and ``+(hash, (round, record))``."""

    def hashed(round_: int, record: Hashable) -> tuple:
        pair = (round_, record)
        return hasher(pair), pair

    def resolve(hash_: int, group: list) -> list | tuple:
        if len(group) == 1 and group[0][0][0] == 0:
            return ()  # a lone pair at round zero: no change (the common case)
        out = []
        (round_, record), count = group[0]
        if round_ > 0:
            out.append((hashed(0, record), -count))
            out.append(((hash_, (round_, record)), count))
        for (round_, record), count in group[1:]:
            out.append((hashed(0, record), -count))
            out.append((hashed(round_ + 1, record), count))
        return out

    return resolve


def intern(collection: Collection, *, hasher: Callable[[tuple], int] = stable_hash) -> Collection:
    """``(record, id)`` for every record of ``collection`` (with its multiplicity), ids unique among
    the records present at each time.

    ``id = hasher((round, record))``: every record starts at round zero; among records whose pairs
    collide, the least pair wins and the others move to the next round, until no two collide. The
    loop starts empty and develops only the changes to the round-zero pairs (the 2018 post's final
    version), so a collision-free record costs one reduce evaluation and is never fed back. Pairs
    travel with their hash, ``(hash, (round, record))``, so each is hashed once: the reduce groups
    them by it and the ids are read off them.
    ``hasher`` must be deterministic and its range larger than the number of distinct records.

    With the default ``stable_hash`` (or a :class:`StableHashModulo`), in the outer scope of a
    single-worker dataflow, one compiled operator computes the same output
    (:mod:`ddflow.operators.nodes.intern`): the hashes in bulk, and the rounds only for records whose
    round-zero hashes collide. Elsewhere, and for other hashers, the loop below does."""
    modulus = FULL if hasher is stable_hash else hasher.modulus if isinstance(hasher, StableHashModulo) else None
    if modulus is not None and collection.scope.parent is None and collection.context.worker is None:
        return collection._then(Intern(collection.scope, modulus=modulus))
    return _intern_rounds(collection, hasher)


def _intern_rounds(collection: Collection, hasher: Callable[[tuple], int]) -> Collection:
    """``intern`` as a loop of reductions (the diff-based collision rounds), for any hasher and scope."""

    def round_zero(record: Hashable) -> tuple:
        pair = (0, record)
        if fast and type(record) is int:  # key_hash of (0, an int), inlined
            return hash((hash(pair),)) & ID_MASK, pair
        return hasher(pair), pair

    fast = hasher is stable_hash

    init = collection.map(round_zero)
    resolve = _resolve(hasher)

    def rounds(changes: Collection) -> Collection:
        return init.concat(changes).reduce(resolve).map(_second)

    return (
        collection.filter(_never)
        .iterate(rounds)
        .concat(init)
        .map(_record_and_id)
    )


def _second(pair: tuple) -> object:
    return pair[1]


def _never(_record: object) -> bool:
    return False


def _record_and_id(hashed: tuple) -> tuple:
    hash_, (_round, record) = hashed
    return record, hash_
