"""reachability(roots, edges) against breadth-first search, at every complete time of random streams."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from library_streams import check_stream, streams

from support.oracles import reachable_pairs

from ddflow.operators.library import reachability
from ddflow.operators.testing import sliding_window_graph

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

nodes = st.integers(0, 7)
edges = st.tuples(nodes, nodes)


@given(streams({"roots": nodes, "edges": edges}, initial=14))
def test_reachability_matches_bfs(stream):
    check_stream(stream, reachability, reachable_pairs)


@given(streams({"edges": edges, "roots": st.integers(0, 2)}, initial=20, max_changes=60, max_epochs=3))
def test_reachability_few_roots_many_changes_per_epoch(stream):
    check_stream(stream, lambda e, r: reachability(r, e), lambda e, r: reachable_pairs(r, e))


def test_reachability_roadmap_window_spot_check():
    """The roadmap's workload, small: 50 nodes, 100 edges, 3 roots, 300 changes each at its own time."""
    from library_streams import Stream

    window = sliding_window_graph(50, 100, 300, seed=42)
    stream = Stream({"roots": [(r, 0, 1) for r in range(3)], "edges": list(window.updates)},
                    [1, 11, 111, 201, 301], seed=7)
    check_stream(stream, reachability, reachable_pairs)
