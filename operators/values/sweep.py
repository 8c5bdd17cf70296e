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

from collections.abc import Iterable

from ..tuning import EngineConfig
from .interner import Interner


def due(interner: Interner, tuning: EngineConfig) -> bool:
    """Whether the interner has grown enough since the last sweep for the next one."""
    in_use = len(interner)
    return in_use >= tuning.sweep_min_ids and in_use >= tuning.sweep_growth * interner.live_after_sweep


def sweep(interner: Interner, nodes: Iterable) -> int:
    """Give back the ids none of ``nodes`` (every node of a dataflow) holds; returns how many. Call
    only between steps (no batch in flight): every id not reported by some node's ``held_ids`` is
    reclaimed."""
    marks = interner.marks()
    for node in nodes:
        for column in node.held_ids():
            interner.mark(column, marks)
    return interner.reclaim(marks)
