"""Example dataflows named by the example configs (``function(df, inputs, **args) -> outputs``).

They use only the public engine API (``ddflow.operators``) and double as templates for users:
a dataflow function receives the ``Dataflow`` and its input collections, and returns its output
collections by the names the config's ``[[outputs]]`` declare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["reachability", "page_counts", "max_reading"]


def reachability(df: Any, inputs: Mapping[str, Any], *, roots: Iterable[int] = (0,)) -> dict[str, Any]:
    """Pairs ``(root, node)`` such that ``node`` is reachable from ``root`` over the ``edges`` input.

    ``edges`` holds ``(src, dst)`` records (a multiset: a duplicate edge must be removed twice).
    The roots are a constant collection at time 0 (an input closed at once, so it never holds
    the frontier back); reachability is the fixed point of ``reach = roots + reach ⋈ edges``.
    """
    edges = inputs["edges"]
    seeds = df.new_input("roots")
    for root in sorted(set(roots)):
        seeds.insert((root, root), 0)  # (node, root): the root reaches itself
    seeds.close()
    start = seeds.collection

    def step(reach: Any) -> Any:
        # (node, root) ⋈ (node, dst) -> (node, (root, dst)) -> (dst, root)
        return reach.join(edges).map(_follow).concat(start).distinct()

    reached = start.iterate(step)
    return {"reachable": reached.map(_swap)}


def page_counts(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``(page, views)``: how many ``(user, page)`` view records each page has."""
    return {"page_views": inputs["views"].map(_page).count()}


def max_reading(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``(sensor, reading)``: the largest reading each sensor currently holds."""
    return {"max_reading": inputs["readings"].max()}


def _follow(joined: tuple[Any, tuple[Any, Any]]) -> tuple[Any, Any]:
    _node, (root, dst) = joined
    return (dst, root)


def _swap(pair: tuple[Any, Any]) -> tuple[Any, Any]:
    return (pair[1], pair[0])


def _page(view: tuple[Any, Any]) -> Any:
    return view[1]
