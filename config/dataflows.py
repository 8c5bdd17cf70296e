"""Example dataflows named by the example configs (``function(df, inputs, **args) -> outputs``).

They use only the public engine API (``ddflow.operators``) and double as templates for users:
a dataflow function receives the ``Dataflow`` and its input collections, and returns its output
collections by the names the config's ``[[outputs]]`` declare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["reachability", "page_counts", "max_reading", "views_by_title"]


def reachability(df: Any, inputs: Mapping[str, Any], *, roots: Iterable[int] = (0,)) -> dict[str, Any]:
    """Pairs ``(root, node)`` such that ``node`` is reachable from ``root`` over the ``edges`` input.

    ``edges`` holds ``(src, dst)`` records (a multiset: a duplicate edge must be removed twice).
    The roots are a constant collection at time 0 (an input closed at once, so it never holds
    the frontier back; with several workers, worker 0 holds it); reachability is the fixed point of
    ``reach = roots + reach ⋈ edges``.
    """
    edges = inputs["edges"]
    seeds = df.new_input("roots")
    if df.worker is None or df.worker.index == 0:  # a constant collection: inserted once, not per worker
        for root in sorted(set(roots)):
            seeds.insert((root, root), 0)  # (node, root): the root reaches itself
    seeds.close()
    start = seeds.collection

    def step(reach: Any) -> Any:
        # (node, root) ⋈ (node, dst) -> (dst, root), built by the join itself (no intermediate
        # (node, (root, dst)) records and no map after it: ~12% of a change's epoch on 1k/2k)
        # named, the metrics call its arrangements reach.by_key, candidates.by_self, reached.output
        return reach.name("reach").join_map(edges, _follow).concat(start).name("candidates").distinct().name("reached")

    reached = start.iterate(step)
    return {"reachable": reached.map(_swap)}


def page_counts(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``(page, views)``: how many ``(user, page)`` view records each page has."""
    return {"page_views": inputs["views"].map(_page).count()}


def max_reading(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``(sensor, reading)``: the largest reading each sensor currently holds."""
    return {"max_reading": inputs["readings"].max()}


def views_by_title(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Page views counted per page and per page title.

    ``views`` holds ``(user, page)`` view records, ``pages`` the table of ``(page, title)`` rows
    (e.g. a database table through Debezium). ``views_per_page``: ``(page, views)``;
    ``views_per_title``: ``(title, views)`` over the views of pages that have a title, so renaming
    a page moves its views from the old title to the new one.
    """
    by_page = inputs["views"].map(_page_user)
    return {
        "views_per_page": inputs["views"].map(_page).count(),
        "views_per_title": by_page.join(inputs["pages"]).map(_title).count(),
    }


def _page_user(view: tuple[Any, Any]) -> tuple[Any, Any]:
    return (view[1], view[0])


def _title(joined: tuple[Any, tuple[Any, Any]]) -> Any:
    _page, (_user, title) = joined
    return title


def _follow(_node: Any, root: Any, dst: Any) -> tuple[Any, Any]:
    return (dst, root)


def _swap(pair: tuple[Any, Any]) -> tuple[Any, Any]:
    return (pair[1], pair[0])


def _page(view: tuple[Any, Any]) -> Any:
    return view[1]
