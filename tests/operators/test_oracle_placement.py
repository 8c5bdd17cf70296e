"""Oracle checks for loops whose variable is arranged by key, with 1, 2 and 3 workers: where the
body's result is placed by key (a distinct of pairs, a reduction by key, a count), the variable is
not exchanged in the rounds (see ``ddflow.operators.placement``); where it is not (a map after the
distinct, an arrangement the body shares with a count or hands out), it is, as before. Every shape
must equal the oracle at every time, with retractions and signed multiplicities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle_harness import check_pipeline, sources

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

nodes = st.integers(0, 5)
edges = st.tuples(nodes, nodes)
GRAPH = dict(max_epochs=10, max_per_epoch=16)


def _start(roots):
    return roots.map(lambda e: (e[0], e[0])).distinct()


def keyed_distinct(roots, graph):
    """Reachability keyed by node, as the library writes it: the result is a distinct of pairs."""
    g, start = graph.distinct(), _start(roots)
    return start.iterate(lambda reach: reach.join_map(g, lambda _n, root, dst: (dst, root)).concat(start).distinct())


def keyed_threshold(roots, graph):
    """The same with a threshold keeping records of multiplicity at least two, doubled."""
    g, start = graph.distinct(), _start(roots)

    def body(reach):
        offers = reach.join_map(g, lambda _n, root, dst: (dst, root)).concat(start).concat(start)
        return offers.threshold(lambda _r, c: 2 if c >= 2 else 0)

    return start.iterate(body)


def least_label(roots, graph):
    """Min-label propagation: the result is a reduction by key."""
    g, start = graph.distinct(), _start(roots)
    return start.iterate(lambda labels: labels.join_map(g, lambda _n, lab, dst: (dst, lab)).concat(start).min())


def counted(roots, graph):
    """A count fed back: ``(record, n)`` records keyed by the record, capped so the loop ends."""
    g = graph.distinct()
    seeds = roots.map(lambda e: e[0]).distinct().count()

    def body(v):
        stepped = v.join_map(g, lambda n, _c, dst: dst).concat(seeds.map(lambda r: r[0]))
        return stepped.distinct().count()

    return seeds.iterate(body)


def mapped_after(roots, graph):
    """A map after the distinct: the result is not placed, so the variable is exchanged."""
    g, start = graph.distinct(), _start(roots)

    def body(reach):
        return reach.join_map(g, lambda _n, root, dst: (dst, root)).concat(start).distinct().map(lambda r: (r[0], r[1]))

    return start.iterate(body)


def shared_with_count(roots, graph):
    """The distinct's arrangement is read by a count too: it keeps routing whole records."""
    g, start = graph.distinct(), _start(roots)

    def body(reach):
        offers = reach.join_map(g, lambda _n, root, dst: (dst, root)).concat(start)
        offers.count()  # a second reader of the by-self arrangement
        return offers.distinct()

    return start.iterate(body)


def handed_out(roots, graph):
    """The distinct reads an arrangement the body asked for itself and semijoins with: its routing
    of whole records is kept (a by-self arrangement a join reads must place pairs as whole records)."""
    g, start = graph.distinct(), _start(roots)

    def body(reach):
        offers = reach.join_map(g, lambda _n, root, dst: (dst, root)).concat(start)
        by_self = offers.arrange_by_self()
        return by_self.distinct().concat(reach.semijoin(by_self).negate(), reach.semijoin(by_self))

    return start.iterate(body)


def nested_keyed(roots, graph):
    """A keyed reachability nested in a loop, started from the outer loop's variable (routed by key in
    the enclosing loop's scope, once per pass there)."""
    g, start = graph.distinct(), _start(roots)

    def outer(v):
        inner = v.iterate(lambda r: r.join_map(g, lambda _n, root, dst: (dst, root)).concat(v).distinct())
        return inner.concat(start).distinct()

    return start.iterate(outer)


@given(srcs=sources(edges, 2, **GRAPH))
def test_a_nested_loop_variable_arranged_by_key_equals_the_oracle(srcs):
    check_pipeline(nested_keyed, srcs)


SHAPES = [keyed_distinct, keyed_threshold, least_label, counted, mapped_after, shared_with_count, handed_out]
PLACED = {keyed_distinct, keyed_threshold, least_label, counted}  # the variable needs no exchange


@pytest.mark.parametrize("shape", SHAPES, ids=lambda f: f.__name__)
@given(srcs=sources(edges, 2, **GRAPH))
def test_a_loop_variable_arranged_by_key_equals_the_oracle(shape, srcs):
    check_pipeline(shape, srcs)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda f: f.__name__)
def test_the_variable_is_exchanged_only_where_the_result_is_not_placed_by_key(shape):
    from ddflow.operators.nodes.exchange import Exchange
    from ddflow.operators.nodes.linear import Concat
    from ddflow.operators.workers import Workers

    workers = Workers(2, lambda df: shape(df.new_input("roots").collection, df.new_input("edges").collection))
    nodes = list(workers.dataflows[0]._all_nodes())
    (variable,) = [n for n in nodes if isinstance(n, Concat) and n.name == "variable"]
    exchanged = any(isinstance(c, Exchange) for c, _port in variable.consumers)
    assert exchanged is (shape not in PLACED)
    keyed = [n for n in nodes if isinstance(n, Exchange) and n.keyed]
    assert len(keyed) == (shape in (keyed_distinct, keyed_threshold))
