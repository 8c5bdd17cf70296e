"""An example of a user's dataflow module, shipped beside the worker config.

The overlay puts this file into the config's ConfigMap, so it lies beside ``ddflow.toml`` in
/etc/ddflow, and the config's ``[dataflow] path = ["."]`` puts that directory on the import path.
(The other way, an image built FROM ddflow's: deploy/container/Dockerfile.dataflow.)
"""

from __future__ import annotations

from typing import Any


def views_per_page(df: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """``(page, views)``: how many ``(user, page)`` view records each page has."""
    return {"page_views": inputs["views"].map(lambda view: view[1]).count()}
