"""How many workers the oracle and library suites share a dataflow among.

``DDFLOW_TEST_WORKERS`` (default ``mixed``):

* ``mixed``: each test runs once and every example picks its own count, 1, 2 or 3, from the example
  itself (``count_for``), so one run covers every count at the cost of about one;
* a comma list such as ``1,2,3``: each test runs once per listed count with all its examples (the
  thorough setting; ``1`` alone for a quick local run).

``DDFLOW_TEST_TRANSPORT`` (default ``local``): how several workers meet. ``local``: threads over one
in-process transport; ``mesh``: each worker its own end of a mesh (real ZeroMQ sockets over
``ipc://``, ``ddflow.daemon.cluster.mesh``), so the suites check the mesh's wire format too.
"""

from __future__ import annotations

import os
import tempfile
import uuid

SPEC = os.environ.get("DDFLOW_TEST_WORKERS", "").strip() or "mixed"
MIXED = (1, 2, 3)
# the suites' ``workers`` fixture parameters: None means "mixed"
COUNTS: list[int | None] = [None] if SPEC == "mixed" else [int(w) for w in SPEC.split(",") if w.strip()]


def fixture_id(count: int | None) -> str:
    return "mixed" if count is None else f"{count}w"


def count_for(setting: int | None, key: int) -> int:
    """The workers an example runs with: ``setting`` when fixed, else one of ``MIXED`` picked by
    ``key`` (a number the example determines, so a failing example replays with its count)."""
    return MIXED[key % len(MIXED)] if setting is None else setting


TRANSPORT = os.environ.get("DDFLOW_TEST_TRANSPORT", "").strip() or "local"
_open: list = []  # the mesh ends of the previous example, closed when the next one starts


def transport(count: int):
    """What ``Workers(count, ..., transport=...)`` meets through under ``DDFLOW_TEST_TRANSPORT``:
    None (its own in-process transport) or one mesh end per worker."""
    if TRANSPORT == "local":
        return None
    if TRANSPORT != "mesh":
        raise ValueError(f"DDFLOW_TEST_TRANSPORT must be 'local' or 'mesh', got {TRANSPORT!r}")
    from ddflow.daemon.cluster.mesh import MeshTransport

    while _open:
        _open.pop().close()
    folder, run = tempfile.mkdtemp(prefix="ddflow-mesh-"), uuid.uuid4().hex
    ends = [MeshTransport([f"ipc://{folder}/w{i}" for i in range(count)], i, run=run) for i in range(count)]
    _open.extend(ends)
    return ends
