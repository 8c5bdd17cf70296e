"""connected_components against union-find and scc against Tarjan, at every complete time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from library_reference import component_labels, scc_edges
from library_streams import check_stream, streams

from ddflow.operators.library import connected_components, scc

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

nodes = st.integers(0, 7)
edges = st.tuples(nodes, nodes)


@given(streams({"edges": edges}, initial=12))
def test_connected_components_match_union_find(stream):
    check_stream(stream, connected_components, component_labels)


@given(streams({"edges": edges}, initial=12, max_changes=30))
def test_scc_matches_tarjan(stream):
    check_stream(stream, scc, scc_edges)


@given(streams({"edges": st.tuples(st.integers(0, 4), st.integers(0, 4))}, initial=16, max_changes=30))
def test_scc_dense_small_graphs(stream):
    # few nodes, many edges: large components that split and merge as edges come and go
    check_stream(stream, scc, scc_edges)
