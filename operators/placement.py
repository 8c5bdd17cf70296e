"""Where a collection's updates lie when several workers run a dataflow.

Before an arrangement, an exchange (:mod:`ddflow.operators.nodes.exchange`) moves each update to the
worker that owns its key. A collection is *placed by key* when every update of it already lies on
the worker that owns its record's key (the first item of a ``(key, val)`` pair): a by-key
arrangement of it needs no exchange. :meth:`Collection.iterate <ddflow.operators.collection.Collection.iterate>`
uses this for a loop's variable: when the body arranges the variable by key and its result is placed
by key, the collection entering the loop is routed by key in the enclosing scope, and the loop's
rounds exchange nothing for the variable (by induction over the rounds: round 0 is what entered,
round ``r`` is the result of round ``r - 1``).

What is placed by key, read from the graph while it is built:

* a reduction by key (``min``, ``max``, ``sum``, ``top_k``, ``reduce``): ``(key, out)`` lies where
  the key's updates met;
* a ``count`` whose by-self exchange is not keyed: ``(record, n)`` lies on the owner of ``record``;
* a ``distinct`` or ``threshold`` whose by-self exchange is keyed (:func:`place_by_key` keys it when
  nothing else reads its arrangement: equal records still meet, and a pair now lies on its key's
  owner);
* a by-key exchange, a keyed one, and what ``negate``, ``filter``, ``inspect``, ``consolidate``,
  ``enter`` and ``concat`` make of placed collections: they move no record.

Every worker builds the same graph, so every worker makes the same choices.
"""

from __future__ import annotations

from .graph import Node
from .nodes import linear
from .nodes.arrange import Arrange
from .nodes.exchange import Exchange
from .nodes.reduce.logic import Count, Threshold
from .nodes.reduce.node import Reduce

_MOVE_NOTHING = (linear.Negate, linear.Filter, linear.Inspect, linear.Consolidate, linear.Concat)


def placed_by_key(node: Node) -> bool:
    """Whether every update ``node`` emits lies on the owner of its record's key (see the module)."""
    return _placed(node, set())


def place_by_key(node: Node) -> bool:
    """Make ``node``'s output placed by key if it is a distinct or threshold whose by-self exchange
    only it (and other such reductions) reads, by keying that exchange; whether ``node`` is placed
    by key now."""
    if placed_by_key(node):
        return True
    exchange = _keyable(node)
    if exchange is None:
        return False
    exchange.keyed = True
    arrange = node.reads[0]
    arrange.origin._forget(by_self=True)  # later by-self arrangements of it get an exchange of their own
    return True


def _placed(node: Node, seen: set[int]) -> bool:
    if id(node) in seen:  # a cycle (a loop's variable): not known here
        return False
    seen.add(id(node))
    if isinstance(node, Exchange):
        return not node.by_self or node.keyed
    if isinstance(node, Reduce):
        arrange = node.reads[0]
        if not arrange.by_self:
            return True
        exchange = arrange.exchange
        if exchange is None:
            return False
        return exchange.keyed if isinstance(node.logic, Threshold) else isinstance(node.logic, Count) and not exchange.keyed
    if isinstance(node, linear.Enter):
        return node.source is not None and _placed(node.source, seen)
    if isinstance(node, _MOVE_NOTHING):
        inputs = _producers(node)
        return ({port for port, _p in inputs} == set(range(len(node.buffers)))
                and all(_placed(p, seen) for _port, p in inputs))
    return False


def _keyable(node: Node) -> Exchange | None:
    """The by-self exchange before ``node``'s arrangement, when ``node`` is a distinct or threshold and
    every reader of that arrangement is one, and the arrangement was never handed to a caller."""
    if not isinstance(node, Reduce) or not isinstance(node.logic, Threshold):
        return None
    arrange: Arrange = node.reads[0]
    exchange = arrange.exchange
    if not arrange.by_self or exchange is None or exchange.keyed or arrange.shared:
        return None
    readers = [n for n in arrange.scope.nodes if arrange in n.reads]
    if not all(isinstance(n, Reduce) and isinstance(n.logic, Threshold) for n in readers):
        return None
    return exchange


def _producers(node: Node) -> list[tuple[int, Node]]:
    """``(port, producer)`` of each of ``node``'s inputs in its scope."""
    return [(port, p) for p in node.scope.nodes for c, port in p.consumers if c is node]
