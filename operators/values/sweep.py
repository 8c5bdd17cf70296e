"""Reclaiming ids: a mark-and-sweep over a dataflow's state at a safe point.

A record's id is in use while some state of the dataflow holds it: a node's buffered batches, a
trace's batches, a reduction's pending keys, a capture's updates (each node reports its columns with
``Node.held_ids``), a constant pinned by :meth:`Interner.id`, or a pair in use that has it as a
component. When its updates have been compacted away everywhere, nothing holds it and its id can
name another record. :func:`sweep` marks every id reachable from those roots and gives the others
back; caches keyed by ids (memos, record builders) are cleared at the same time.

It runs at the end of ``Dataflow.run()``, when no batch is in flight, and only when the ids in use
have grown by ``EngineConfig.sweep_growth`` times since the last sweep (and number at least
``sweep_min_ids``): its cost, proportional to the live state, is paid for by the growth. Memory then
follows the records alive, not every record ever seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..dataflow import Dataflow


def due(dataflow: Dataflow) -> bool:
    """Whether the interner has grown enough since the last sweep for the next one."""
    config = dataflow.config
    in_use = len(dataflow.interner)
    return in_use >= config.sweep_min_ids and in_use >= config.sweep_growth * dataflow.interner.live_after_sweep


def sweep(dataflow: Dataflow) -> int:
    """Give back the ids no node of ``dataflow`` holds; returns how many. Call only between steps
    (no batch in flight): every id not reported by some node's ``held_ids`` is reclaimed."""
    interner = dataflow.interner
    marks = interner.marks()
    for node in dataflow._all_nodes():
        for column in node.held_ids():
            interner.mark(column, marks)
    return interner.reclaim(marks)
