"""What the engine and every output format can hold: integers within int64, finite floats.

A decoder may meet values its format can spell but ddflow cannot carry through: an integer past
int64 (JSON has no limit, msgpack has uint64), a float that is not finite (msgpack's infinities and
NaN; JSON's ``1e400``, which Python reads as infinity). Accepted, such a value would stop the daemon
later, when an output encoder cannot write it, on every restart. So every decoder refuses them on
input (reason ``field_range``), wherever they sit in a record (nested arrays included): what the
daemon accepts it can always publish.

`out_of_range` checks one value; `column_in_range` checks a column of values at C speed when the
column is homogeneous (the common case of a batch), and value by value otherwise.
"""

from __future__ import annotations

from math import isfinite
from typing import Any

from ...operators.lattice import T_MAX, T_MIN

__all__ = ["out_of_range", "column_in_range"]

_PLAIN = frozenset((str, bytes, bool, type(None)))


def out_of_range(value: Any) -> Any:
    """The first integer outside int64 or non-finite float in ``value`` (tuples searched), or None."""
    kind = type(value)
    if kind is int:
        return None if T_MIN <= value <= T_MAX else value
    if kind is float:
        return None if isfinite(value) else value
    if kind is tuple:
        for item in value:
            bad = out_of_range(item)
            if bad is not None:
                return bad
    return None


def column_in_range(column: tuple | list) -> bool:
    """Whether no value of ``column`` holds an integer outside int64 or a non-finite float."""
    kinds = set(map(type, column))
    if kinds <= _PLAIN:
        return True
    if kinds == {int}:
        return min(column) >= T_MIN and max(column) <= T_MAX
    if kinds == {float}:
        return all(map(isfinite, column))
    if kinds == {tuple} and len(set(map(len, column))) == 1:
        return all(column_in_range(part) for part in zip(*column))
    return all(out_of_range(v) is None for v in column)


def describe(value: Any) -> str:
    """Why ``value`` (an `out_of_range` result) cannot be carried."""
    if type(value) is int:
        return f"the integer {value} is outside int64"
    return f"the float {value!r} is not finite"
