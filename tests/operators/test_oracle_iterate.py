"""Oracle checks for composite dataflows: join/distinct/count, iterate (single and doubly nested).

Graph inputs are ``(src, dst)`` records over a few nodes with signed multiplicities; loops read
``edges.distinct()`` so that every body is monotone and has a fixed point whatever the input.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle_harness import check_pipeline, pairs, small_ints, sources

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

nodes = st.integers(0, 5)
edges = st.tuples(nodes, nodes)

GRAPH = dict(max_epochs=12, max_per_epoch=20)


@given(sources(pairs, 2))
def test_join_then_distinct_then_count(srcs):
    def pipeline(a, b):
        return a.join(b).map(lambda r: (r[1][0], r[1][1])).distinct().map(lambda r: r[0]).count()

    check_pipeline(pipeline, srcs)


def reachability(roots, graph):
    """Nodes reachable from ``roots`` along ``graph``; the loop body reads both from outside."""
    edges_ = graph.distinct()
    start = roots.distinct()
    return start.iterate(lambda reach: edges_.semijoin(reach).map(lambda e: e[1]).concat(start).distinct())


def reachability_entered(roots, graph):
    """The same, entering the outer collections explicitly with ``.enter(scope)``."""
    edges_ = graph.distinct()
    start = roots.distinct()

    def body(reach):
        inner_edges = edges_.enter(reach.scope)
        inner_start = start.enter(reach.scope)
        return inner_edges.semijoin(reach).map(lambda e: e[1]).concat(inner_start).distinct()

    return start.iterate(body)


@given(sources(nodes, 1, **GRAPH), sources(edges, 1, **GRAPH))
def test_reachability(roots, graph):
    # Independent epoch schedules for the two inputs, replayed in lockstep.
    check_pipeline(reachability, [roots[0], graph[0]])


@given(sources(edges, 2, **GRAPH))
def test_reachability_entered_explicitly(srcs):
    check_pipeline(lambda r, g: reachability_entered(r.map(lambda e: e[0]), g), srcs)


@given(sources(edges, **GRAPH))
def test_reachability_from_arranged_edges(srcs):
    def pipeline(g):
        arranged = g.distinct().arrange_by_key()
        start = g.map(lambda e: e[0]).filter(lambda n: n < 2).distinct()
        reach = start.iterate(lambda r: arranged.semijoin(r).map(lambda e: e[1]).concat(start).distinct())
        return reach, arranged.join(reach.map(lambda n: (n, "reached")))

    check_pipeline(pipeline, srcs)


def connected_components(graph):
    """(node, least node label in its component) by min-label propagation over symmetric edges."""
    sym = graph.distinct().flat_map(lambda e: [e, (e[1], e[0])]).distinct()
    labels = sym.map(lambda e: (e[0], e[0])).distinct()

    def body(current):
        proposals = current.join(sym).map(lambda r: (r[1][1], r[1][0]))
        return proposals.concat(labels).min()

    return labels.iterate(body)


@given(sources(edges, **GRAPH))
def test_connected_components(srcs):
    check_pipeline(connected_components, srcs)


@given(sources(small_ints, 2, **GRAPH))
def test_iterate_with_signed_multiplicities_inside(srcs):
    # v <- distinct(a - b + halve(v)): the input to distinct carries negative counts every round.
    def pipeline(a, b):
        base = a.concat(b.negate())
        return base.iterate(lambda v: base.concat(v.map(lambda x: x // 2)).distinct())

    check_pipeline(pipeline, srcs)


def two_core(graph):
    """The 2-core of a directed graph: keep removing edges whose source has out-degree < 2 or
    whose destination has in-degree < 2. Later rounds retract what earlier rounds produced."""

    def body(e):
        out_ok = e.map(lambda x: x[0]).count().filter(lambda nc: nc[1] >= 2).map(lambda nc: nc[0])
        in_ok = e.map(lambda x: x[1]).count().filter(lambda nc: nc[1] >= 2).map(lambda nc: nc[0])
        kept = e.semijoin(out_ok).map(lambda x: (x[1], x[0])).semijoin(in_ok)
        return kept.map(lambda x: (x[1], x[0]))

    return graph.distinct().iterate(body)


@given(sources(edges, **GRAPH))
def test_iterate_pruning_with_count_in_the_body(srcs):
    check_pipeline(two_core, srcs)


def nested_reachability(roots, graph):
    """Doubly nested: each outer round re-runs an inner reachability loop from the outer set."""
    edges_ = graph.distinct()
    start = roots.distinct()

    def outer(frontier):
        def inner(reach):
            # `edges_` comes from two scopes out, `frontier` from the enclosing loop.
            return edges_.semijoin(reach).map(lambda e: e[1]).concat(frontier).distinct()

        return frontier.iterate(inner).concat(start).distinct()

    return start.iterate(outer)


@given(sources(edges, 2, **GRAPH))
def test_doubly_nested_reachability(srcs):
    check_pipeline(lambda r, g: nested_reachability(r.map(lambda e: e[0]), g), srcs)


def nested_reachability_entered(roots, graph):
    """The same doubly nested loop, entering every outer collection explicitly."""
    edges_ = graph.distinct()
    start = roots.distinct()

    def outer(frontier):
        def inner(reach):
            return (
                edges_.enter(reach.scope)
                .semijoin(reach)
                .map(lambda e: e[1])
                .concat(frontier.enter(reach.scope))
                .distinct()
            )

        return frontier.iterate(inner).concat(start.enter(frontier.scope)).distinct()

    return start.iterate(outer)


@given(sources(edges, 2, **GRAPH))
def test_doubly_nested_reachability_entered_explicitly(srcs):
    check_pipeline(lambda r, g: nested_reachability_entered(r.map(lambda e: e[0]), g), srcs)


def _propagate(edges_, nodes_):
    """Least label reaching each node along ``edges_`` from the labels ``nodes_`` (inner loop)."""
    return nodes_.iterate(
        lambda inner: inner.join_map(edges_, lambda _node, label, dst: (dst, label))
        .concat(nodes_)
        .min()
    )


def _trim_edges(cycle, edges_):
    """Keep the edges of ``edges_`` whose ends get the same label propagated along ``cycle``."""
    nodes_ = edges_.map(lambda e: (e[1], e[1])).distinct()
    labels = _propagate(cycle, nodes_).arrange_by_key()
    return (
        edges_.join_map(labels, lambda e1, e2, l1: (e2, (e1, l1)))
        .join_map(labels, lambda e2, e1_l1, l2: ((e1_l1[0], e2), (e1_l1[1], l2)))
        .filter(lambda r: r[1][0] == r[1][1])
        .map(lambda r: (r[0][1], r[0][0]))
    )


def strongly_connected(graph):
    """Edges within strongly connected components (differential dataflow's scc.rs), doubly nested."""
    edges_ = graph.distinct()

    def body(inner):
        forward = edges_.enter(inner.scope)
        backward = forward.map(lambda e: (e[1], e[0]))
        return _trim_edges(_trim_edges(inner, forward), backward)

    return edges_.iterate(body)


@given(sources(edges, **GRAPH))
def test_strongly_connected_components(srcs):
    check_pipeline(strongly_connected, srcs)
