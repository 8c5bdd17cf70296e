"""Ordering of record values: the order in which ``min``/``max``/``top_k`` and reductions read vals."""

from __future__ import annotations

from collections.abc import Sequence


def sort_values(values: Sequence[object]) -> list[int]:
    """Indices ordering ``values`` by Python ordering, falling back to ``(type name, repr)`` when the
    values cannot be compared with each other (mixed types)."""
    try:
        return sorted(range(len(values)), key=values.__getitem__)
    except TypeError:
        return sorted(range(len(values)), key=lambda i: (type(values[i]).__name__, repr(values[i])))
