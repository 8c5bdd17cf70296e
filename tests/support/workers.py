"""How many workers the oracle and library suites share a dataflow among.

``DDFLOW_TEST_WORKERS`` (default ``mixed``):

* ``mixed``: each test runs once and every example picks its own count, 1, 2 or 3, from the example
  itself (``count_for``), so one run covers every count at the cost of about one;
* a comma list such as ``1,2,3``: each test runs once per listed count with all its examples (the
  thorough setting; ``1`` alone for a quick local run).

``DDFLOW_TEST_TRANSPORT`` (default ``mixed``): how several workers meet. ``local``: threads over one
in-process transport; ``mesh``: each worker its own end of a mesh (real ZeroMQ sockets over
``ipc://``, ``ddflow.daemon.cluster.mesh``), so the suites check the mesh's wire format and
protocol too; ``mixed``: every other example of several workers over the mesh, picked from the
example itself like its count (``transport_for``).
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


TRANSPORT = os.environ.get("DDFLOW_TEST_TRANSPORT", "").strip() or "mixed"
if TRANSPORT not in ("local", "mesh", "mixed"):
    raise ValueError(f"DDFLOW_TEST_TRANSPORT must be 'local', 'mesh' or 'mixed', got {TRANSPORT!r}")
_open: list = []  # the mesh ends of the previous example, closed when the next one starts


def transport_for(key: int) -> str:
    """``local`` or ``mesh`` for an example: ``TRANSPORT`` when fixed, else picked by ``key`` (the
    number `count_for` takes, read at another digit so that every count meets both)."""
    return ("local", "mesh")[(key // len(MIXED)) % 2] if TRANSPORT == "mixed" else TRANSPORT


def transport(count: int, key: int):
    """What ``Workers(count, ..., transport=...)`` meets through for the example ``key``
    (`transport_for`): None (its own in-process transport) or one mesh end per worker."""
    if transport_for(key) == "local":
        return None
    from ddflow.daemon.cluster.mesh import MeshTransport

    while _open:
        _open.pop().close()
    folder, run = tempfile.mkdtemp(prefix="ddflow-mesh-"), uuid.uuid4().hex
    ends = [MeshTransport([f"ipc://{folder}/w{i}" for i in range(count)], i, run=run) for i in range(count)]
    _open.extend(ends)
    return ends
