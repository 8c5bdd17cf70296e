"""Reduction kernels: a round's points and desired outputs (:mod:`.points`), the output diffs
that make the output accumulate to them (:mod:`.diffs`), and the per-key histories a reduction keeps
between rounds (:mod:`.history`).

The modes, statuses and kernels of :mod:`.points` are importable from here.
"""

from __future__ import annotations

from . import diffs
from .points import (
    DIFF_OVERFLOW,
    GROUPS,
    LEAST,
    OK,
    POSITIVE,
    SUM,
    TOP,
    TOTAL,
    VALUE_OVERFLOW,
    reduce_points,
    reduce_points_reference,
)

__all__ = ["DIFF_OVERFLOW", "GROUPS", "LEAST", "OK", "POSITIVE", "SUM", "TOP", "TOTAL", "VALUE_OVERFLOW",
           "diffs", "reduce_points", "reduce_points_reference"]
