"""Collections: the public, fluent handle on a stream of updates in a scope.

Every method adds a node to the graph and returns a new ``Collection`` (or an ``Arranged``). Keyed
methods take ``(key, val)`` records; collections from an enclosing scope are entered automatically.

``c.arrange_by_key()`` (or ``arrange_by_self()``) returns an :class:`Arranged`, the handle on an
index that joins and reductions share. Every method of a ``Collection`` works on it: the keyed ones
(joins and reductions) read that index instead of building their own, the others act on the
arranged collection itself.
"""

from __future__ import annotations

from collections.abc import Callable

from .capture import Capture
from .context import Context
from .errors import ConfigurationError, GraphError
from .graph import Node, Scope
from .nodes import linear
from .nodes.arrange import Arrange
from .nodes.calls import function_label
from .nodes.exchange import Exchange
from .nodes.iterate import Feedback, Loop
from .nodes.join import Join
from .nodes.records import record_builder
from .nodes.reduce.logic import Count, Extremum, Logic, Sum, Threshold, TopK, UserReduce
from .nodes.reduce.node import Reduce
from .placement import place_by_key
from .traces.spine import Spine


class Collection:
    """A multiset of records that changes over (partially ordered) time."""

    def __init__(self, node: Node, scope: Scope | None = None) -> None:
        self.node = node
        self.scope = scope or node.scope
        self._entered: dict[int, Collection] = {}
        self._arranged: dict[bool, Arranged] = {}
        self._outer: Collection | None = None  # the collection this one is entered from (an `enter`)
        self._exchanged: dict[bool, Collection] = {}
        self._variable: _Variable | None = None  # a loop's variable while its body is built

    @property
    def context(self) -> Context:
        """What the nodes of this collection's dataflow share (interner, tuning, worker)."""
        return self.scope.context

    def _then(self, node: Node, f: Callable | None = None) -> Collection:
        self.node.connect(node)
        if f is not None:
            node.label = self.context.label(function_label(node.name, f))
        return Collection(node)

    def name(self, label: str) -> Collection:
        """This collection, with the operator that produced it called ``label`` in metrics and
        errors: the arrangements built from it are ``label.by_key`` and ``label.by_self``, a
        reduction's own output trace ``label.output``. Unnamed, an operator is called by its kind
        and its function's qualified name (``map(parse_view)``), an input by its name. Returns this
        collection (``c.map(parse_view).name("views")``); call it before the dataflow first runs."""
        if not isinstance(label, str) or not label:
            raise GraphError(f"a collection's name must be a non-empty str, got {label!r}")
        if self.context.started:
            raise GraphError("name collections before df.run(): metrics keep the names they first saw")
        self.node.label = self.node.given_name = self.context.label(label)
        return self

    # -- scopes ----------------------------------------------------------------------------------
    def enter(self, scope: Scope) -> Collection:
        """This collection inside the (nested) loop ``scope``, at iteration 0."""
        if scope is self.scope:
            return self
        chain = scope.ancestors()
        if self.scope not in chain:
            raise GraphError("a collection can only enter a loop nested inside its own scope")
        c = self
        for s in reversed(chain[: chain.index(self.scope)]):
            if id(s) not in c._entered:
                c._entered[id(s)] = c._then(linear.Enter(s, c.node))
                c._entered[id(s)]._outer = c
            c = c._entered[id(s)]
        return c

    def _bring(self, other) -> Collection | Arranged:
        """``other`` (a collection or an arranged one) made usable in this collection's scope."""
        if other.scope is self.scope:
            return other
        base = other.collection if isinstance(other, Arranged) else other
        return base.enter(self.scope)

    def _innermost(self, other) -> Collection:
        """This collection, entered into ``other``'s scope when that is nested inside this one's."""
        if other.scope is not self.scope and self.scope in other.scope.ancestors():
            return self.enter(other.scope)
        return self

    # -- linear ----------------------------------------------------------------------------------
    def map(self, f: Callable) -> Collection:
        """Each record replaced by ``f(record)`` (``f`` called once per distinct record)."""
        return self._then(linear.Map(self.scope, f), f)

    def filter(self, p: Callable) -> Collection:
        """The records for which ``p(record)`` is true (``p`` called once per distinct record)."""
        return self._then(linear.Filter(self.scope, p), p)

    def flat_map(self, f: Callable) -> Collection:
        """Each record replaced by the records of the iterable ``f(record)``, each with the record's diff."""
        return self._then(linear.FlatMap(self.scope, f), f)

    def negate(self) -> Collection:
        """Every diff negated: ``c.concat(c.negate())`` is empty."""
        return self._then(linear.Negate(self.scope, name="negate"))

    def inspect(self, f: Callable) -> Collection:
        """The same collection; ``f((record, time, diff))`` is called for every update passing through."""
        return self._then(linear.Inspect(self.scope, f), f)

    def consolidate(self) -> Collection:
        """The same collection, its updates held until their time is complete and then consolidated."""
        return self._then(linear.Consolidate(self.scope, name="consolidate"))

    def concat(self, *others: Collection) -> Collection:
        """The multiset union of this collection and ``others`` (diffs add up)."""
        for o in others:
            me = self._innermost(o)
            if me is not self:
                return me.concat(*others)
        node = linear.Concat(self.scope, ports=1 + len(others), name="concat")
        self.node.connect(node, 0)
        for i, o in enumerate(others, 1):
            o = self._bring(o)
            (o.collection if isinstance(o, Arranged) else o).node.connect(node, i)
        return Collection(node)

    # -- arrangements ----------------------------------------------------------------------------
    def _arrange(self, by_self: bool) -> Arranged:
        if by_self not in self._arranged:
            kind = "by_self" if by_self else "by_key"
            name = self.context.name_arrangement(kind)
            source = self.node
            if self.context.worker is not None:  # one of several workers: keys go to their owners first
                if self._variable is not None and not by_self:  # `iterate` connects it (or drops it)
                    source = self._variable.exchange = Exchange(self.scope, by_self=False, arrangement=name)
                else:
                    source = self._routed(by_self, name).node
            node = Arrange(self.scope, by_self=by_self, name=name, source=self.node)
            node.exchange = source if isinstance(source, Exchange) else None  # the exchange before it (placement)
            node.origin = self
            source.connect(node)
            self._arranged[by_self] = Arranged(self, node)
        return self._arranged[by_self]

    def _forget(self, *, by_self: bool) -> None:
        """Drop this collection's arrangement (and exchange) ``by_self`` from its cache: the next one
        asked for is made anew (see :func:`ddflow.operators.placement.place_by_key`)."""
        self._arranged.pop(by_self, None)
        self._exchanged.pop(by_self, None)

    def _shared(self, by_self: bool) -> Arranged:
        """The arrangement ``by_self``, handed to a caller: its placement is never changed."""
        arranged = self._arrange(by_self)
        arranged.node.shared = True
        return arranged

    def _routed(self, by_self: bool, name: str) -> Collection:
        """This collection's updates, each on the worker that owns its key (the record with
        ``by_self``). A collection entered into a loop is routed where it came from, before it
        enters: an exchange there steps once per pass of that scope instead of once per round of
        the loop, and the loop receives each update already on its owner."""
        if by_self not in self._exchanged:
            if self._outer is not None:
                routed = self._outer._routed(by_self, name).enter(self.scope)
            else:
                node = Exchange(self.scope, by_self=by_self, arrangement=name)
                self.node.connect(node)
                routed = Collection(node)
            self._exchanged[by_self] = routed
        return self._exchanged[by_self]

    def arrange_by_key(self) -> Arranged:
        """Index ``(key, val)`` records by key; joins and reductions given the result share it."""
        return self._shared(False)

    def arrange_by_self(self) -> Arranged:
        """Index whole records (key = record)."""
        return self._shared(True)

    def _arranged_as(self, arranged: Arranged | None, by_self: bool) -> Arranged:
        if arranged is not None and arranged.by_self == by_self:
            return arranged
        return self._arrange(by_self)

    def _other(self, other, by_self: bool) -> Arranged:
        other = self._bring(other)
        if isinstance(other, Arranged):
            return other if other.by_self == by_self else other.collection._arrange(by_self)
        return other._arrange(by_self)

    # -- joins -----------------------------------------------------------------------------------
    def _join(self, other, output, by_self: bool, name: str, _arranged=None, f: Callable | None = None) -> Collection:
        me = self._innermost(other)
        if me is not self:
            return me._join(other, output, by_self, name, f=f)
        left = self._arranged_as(_arranged, False)
        right = self._other(other, by_self)
        node = Join(self.scope, left.node, right.node, output, name=name)
        node.reads = (left.node, right.node)
        if f is not None:
            node.label = self.context.label(function_label(name, f))
        return Collection(node)

    def join(self, other, *, _arranged=None) -> Collection:
        """``(key, (v1, v2))`` for every pair of records with equal keys."""
        build = record_builder(self.context.interner, lambda key, v1, v2: (key, (v1, v2)))
        return self._join(other, build, False, "join", _arranged)

    def join_map(self, other, f: Callable, *, _arranged=None) -> Collection:
        """``f(key, v1, v2)`` for every pair of records with equal keys."""
        return self._join(other, record_builder(self.context.interner, f), False, "join_map", _arranged, f)

    def semijoin(self, keys, *, _arranged=None) -> Collection:
        """Records whose key is in ``keys`` (multiplicities multiply)."""
        build = record_builder(self.context.interner, lambda key, val, _unit: (key, val))
        return self._join(keys, build, True, "semijoin", _arranged)

    def antijoin(self, keys, *, _arranged=None) -> Collection:
        """Records whose key is not in ``keys``: ``self - semijoin(keys)``."""
        return self._innermost(keys).concat(self.semijoin(keys, _arranged=_arranged).negate())

    # -- reductions ------------------------------------------------------------------------------
    def _reduce(self, logic: type[Logic], *args, by_self: bool, name: str, _arranged=None,
                f: Callable | None = None) -> Collection:
        arranged = self._arranged_as(_arranged, by_self)
        context = self.context
        node = Reduce(self.scope, arranged.node, logic(context.interner, *args, chunk=context.tuning.user_chunk), name=name)
        node.reads = (arranged.node,)
        if f is not None:
            node.label = self.context.label(function_label(name, f))
        return Collection(node)

    def reduce(self, f: Callable, *, _arranged=None) -> Collection:
        """``(key, out)`` from ``f(key, [(val, count), ...]) -> [(out, count), ...]`` per non-empty group."""
        return self._reduce(UserReduce, f, by_self=False, name="reduce", _arranged=_arranged, f=f)

    def min(self, *, _arranged=None) -> Collection:
        """``(key, least val)`` per key: the smallest val with positive count."""
        return self._reduce(Extremum, False, by_self=False, name="min", _arranged=_arranged)

    def max(self, *, _arranged=None) -> Collection:
        """``(key, greatest val)`` per key: the largest val with positive count."""
        return self._reduce(Extremum, True, by_self=False, name="max", _arranged=_arranged)

    def sum(self, *, _arranged=None) -> Collection:
        """``(key, sum of val * count)`` per key."""
        return self._reduce(Sum, by_self=False, name="sum", _arranged=_arranged)

    def top_k(self, k: int, *, _arranged=None) -> Collection:
        """``(key, val)`` for the ``k`` greatest vals of each key (with their counts)."""
        if type(k) is not int or k < 1:
            raise GraphError(f"top_k needs a positive int k, got {k!r}")
        return self._reduce(TopK, k, by_self=False, name="top_k", _arranged=_arranged)

    def count(self, *, _arranged=None) -> Collection:
        """``(record, multiplicity)`` for every record present."""
        return self._reduce(Count, by_self=True, name="count", _arranged=_arranged)

    def distinct(self, *, _arranged=None) -> Collection:
        """Each record with positive multiplicity, once."""
        return self._reduce(Threshold, by_self=True, name="distinct", _arranged=_arranged)

    def threshold(self, f: Callable, *, _arranged=None) -> Collection:
        """Each record with multiplicity ``f(record, count)``."""
        return self._reduce(Threshold, f, by_self=True, name="threshold", _arranged=_arranged, f=f)

    # -- iteration -------------------------------------------------------------------------------
    def iterate(self, body: Callable[[Collection], Collection], *, max_iterations: int | None = None) -> Collection:
        """The fixed point of ``body`` starting from this collection (nestable).

        ``max_iterations``: when given, a loop that still has work at iteration ``max_iterations``
        (``v_n`` for ``n = max_iterations`` differs from ``v_{n-1}`` at some time) raises
        :class:`~ddflow.operators.errors.IterationLimitError` instead of iterating on; without it a
        loop with no fixed point (negative multiplicities can make a clamping step oscillate) runs
        for ever, as in differential dataflow."""
        if max_iterations is not None and (type(max_iterations) is not int or max_iterations < 1):
            raise ConfigurationError(f"iterate max_iterations must be a positive int or None, got {max_iterations!r}")
        loop = Loop(self.scope, max_iterations=max_iterations)
        inner = loop.inner
        variable_node = linear.Concat(inner, ports=2, name="variable")
        variable = Collection(variable_node)
        variable._variable = held = _Variable()
        self.scope.building.append(loop)
        try:
            result = body(variable)
            if not isinstance(result, Collection):
                raise GraphError(f"iterate body must return a Collection, got {type(result).__name__}")
            result = variable._bring(result)
            entered = self._variable_source(inner, variable_node, held.exchange, result)  # (before the loop)
        finally:
            self.scope.building.remove(loop)
            variable._variable = None
        entered.node.connect(variable_node, 0)
        withdrawn = entered.negate()  # (made before the feedback: a pass steps it first, so round 0 is one pass)
        feedback = Feedback(inner, name="feedback")
        result.node.connect(feedback)
        withdrawn.node.connect(feedback)
        feedback.connect(variable_node, 1)
        result.node.connect(loop, 0)
        return Collection(loop)

    def _variable_source(self, inner: Scope, variable: Node, exchange: Exchange | None, result: Collection) -> Collection:
        """What enters the loop ``inner`` as its variable's start. With several workers, when the body
        arranged the variable by key (``exchange``, not connected yet) and the body's ``result`` is
        placed by key (:mod:`ddflow.operators.placement`), this collection is routed by key before it
        enters and the exchange is dropped: the variable is then placed by key in every round. Else the
        exchange routes the variable in every round."""
        if exchange is None:
            return self.enter(inner)
        if not place_by_key(result.node):
            variable.connect(exchange)
            return self.enter(inner)
        inner.nodes.remove(exchange)
        for consumer, port in exchange.consumers:
            variable.connect(consumer, port)
            if isinstance(consumer, Arrange):
                consumer.exchange = None
        return self._routed(False, exchange.arrangement).enter(inner)

    # -- output ----------------------------------------------------------------------------------
    def capture(self, *, history: bool = True) -> Capture:
        """A probe holding the final updates of this collection."""
        if self.scope.parent is not None:
            raise GraphError("capture a loop's result outside the loop")
        node = Capture(self.scope, history=history)
        self.node.connect(node)
        return node


class _Variable:
    """A loop's variable while the body is built: the exchange a by-key arrangement of it made."""

    exchange: Exchange | None = None


class Arranged:
    """An arranged collection: one index (``node``'s trace) that joins and reductions share."""

    def __init__(self, collection: Collection, node: Arrange) -> None:
        self.collection = collection
        self.node = node
        self.scope = collection.scope
        self.by_self = node.by_self

    @property
    def trace(self) -> Spine:
        """The shared trace (spine) of this arrangement."""
        return self.node.trace

    def name(self, label: str) -> Arranged:
        """This arrangement, called ``label`` in metrics (instead of its collection's name and
        ``.by_key``/``.by_self``). Returns this arrangement; call it before the dataflow first runs."""
        if not isinstance(label, str) or not label:
            raise GraphError(f"an arrangement's name must be a non-empty str, got {label!r}")
        if self.scope.context.started:
            raise GraphError("name arrangements before df.run(): metrics keep the names they first saw")
        self.node.label = self.node.given_name = self.scope.context.label(label)
        return self

    # -- keyed: joins and reductions read this index -----------------------------------------------
    def join(self, other) -> Collection:
        """``(key, (v1, v2))`` for every pair of records with equal keys (see ``Collection.join``)."""
        return self.collection.join(other, _arranged=self)

    def join_map(self, other, f: Callable) -> Collection:
        """``f(key, v1, v2)`` for every pair of records with equal keys."""
        return self.collection.join_map(other, f, _arranged=self)

    def semijoin(self, keys) -> Collection:
        """Records whose key is in ``keys`` (multiplicities multiply)."""
        return self.collection.semijoin(keys, _arranged=self)

    def antijoin(self, keys) -> Collection:
        """Records whose key is not in ``keys``."""
        return self.collection.antijoin(keys, _arranged=self)

    def reduce(self, f: Callable) -> Collection:
        """``(key, out)`` from ``f(key, [(val, count), ...]) -> [(out, count), ...]`` per non-empty group."""
        return self.collection.reduce(f, _arranged=self)

    def min(self) -> Collection:
        """``(key, least val)`` per key."""
        return self.collection.min(_arranged=self)

    def max(self) -> Collection:
        """``(key, greatest val)`` per key."""
        return self.collection.max(_arranged=self)

    def sum(self) -> Collection:
        """``(key, sum of val * count)`` per key."""
        return self.collection.sum(_arranged=self)

    def top_k(self, k: int) -> Collection:
        """``(key, val)`` for the ``k`` greatest vals of each key."""
        return self.collection.top_k(k, _arranged=self)

    def count(self) -> Collection:
        """``(record, multiplicity)`` for every record present."""
        return self.collection.count(_arranged=self)

    def distinct(self) -> Collection:
        """Each record with positive multiplicity, once."""
        return self.collection.distinct(_arranged=self)

    def threshold(self, f: Callable) -> Collection:
        """Each record with multiplicity ``f(record, count)``."""
        return self.collection.threshold(f, _arranged=self)

    # -- the rest act on the arranged collection ---------------------------------------------------
    def arrange_by_key(self) -> Arranged:
        """The collection indexed by key (this index when it is one)."""
        return self.collection.arrange_by_key()

    def arrange_by_self(self) -> Arranged:
        """The collection indexed by whole records (this index when it is one)."""
        return self.collection.arrange_by_self()

    def enter(self, scope: Scope) -> Collection:
        """The collection inside the (nested) loop ``scope``."""
        return self.collection.enter(scope)

    def map(self, f: Callable) -> Collection:
        """Each record replaced by ``f(record)``."""
        return self.collection.map(f)

    def filter(self, p: Callable) -> Collection:
        """The records for which ``p(record)`` is true."""
        return self.collection.filter(p)

    def flat_map(self, f: Callable) -> Collection:
        """Each record replaced by the records of the iterable ``f(record)``."""
        return self.collection.flat_map(f)

    def negate(self) -> Collection:
        """Every diff negated."""
        return self.collection.negate()

    def inspect(self, f: Callable) -> Collection:
        """The same collection; ``f((record, time, diff))`` is called for every update."""
        return self.collection.inspect(f)

    def consolidate(self) -> Collection:
        """The same collection, consolidated at complete times."""
        return self.collection.consolidate()

    def concat(self, *others) -> Collection:
        """The multiset union of the collection and ``others``."""
        return self.collection.concat(*others)

    def iterate(self, body: Callable[[Collection], Collection], *, max_iterations: int | None = None) -> Collection:
        """The fixed point of ``body`` starting from the collection."""
        return self.collection.iterate(body, max_iterations=max_iterations)

    def capture(self, *, history: bool = True) -> Capture:
        """A probe holding the final updates of the collection."""
        return self.collection.capture(history=history)
