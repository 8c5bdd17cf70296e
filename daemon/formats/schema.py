"""How an input's records are validated: `InputFormat` (field names and types, size limit) and
its validator, shared by every input format.

A decoder gives the validator each update as a tuple ``(data, time, diff)`` (``data`` a tuple) and
gets back the update converted (an ``int`` in a ``float`` field becomes a float) or a `Malformed`
naming why not; times and diffs must be int64 integers (`ddflow.operators.lattice.T_MIN` ..
`T_MAX`), a diff never zero, a record hashable. For a batch, `_Validator.check_batch` checks
every update column-wise first (and gives the batch as columns) and the one-by-one path runs only
when some update is bad.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...operators.lattice import T_MAX, T_MIN
from ..exceptions import OptionsError
from .ranges import column_in_range, describe, out_of_range
from .types import FIELD_TYPES, Malformed

__all__ = ["InputFormat"]


@dataclass(frozen=True, eq=False)
class InputFormat:
    """How an input's messages are validated.

    ``fields``: the names of the data fields, or a mapping name -> type (one of `FIELD_TYPES`);
    None accepts any hashable data. ``max_message_bytes``: larger values are dead-lettered.
    ``time_required``: False for reclocked inputs, whose time field is ignored (may be nil).
    """

    fields: Sequence[str] | Mapping[str, str] | None = None
    max_message_bytes: int = 1 << 20
    time_required: bool = True

    def __post_init__(self) -> None:
        if self.fields is not None:
            types = dict(self.fields) if isinstance(self.fields, Mapping) else {f: "any" for f in self.fields}
            if isinstance(self.fields, str):
                raise OptionsError(f"input fields: expected a list of names, got the string {self.fields!r}")
            if not types:
                raise OptionsError("input fields: the list of fields is empty")
            for name, kind in types.items():
                if not isinstance(name, str) or not name:
                    raise OptionsError(f"input fields: field name {name!r} is not a non-empty string")
                if kind not in FIELD_TYPES:
                    raise OptionsError(
                        f"input fields: field {name!r} has type {kind!r}; expected one of {', '.join(FIELD_TYPES)}"
                    )
            if len(types) != len(list(self.fields)):
                raise OptionsError(f"input fields: duplicate field names in {list(self.fields)!r}")
        if not isinstance(self.max_message_bytes, int) or self.max_message_bytes <= 0:
            raise OptionsError(f"input max_message_bytes: expected a positive int, got {self.max_message_bytes!r}")
        object.__setattr__(self, "_validator", _Validator(self))

    def check(self, item: tuple[Any, Any, Any], index: int | None = None) -> tuple[Any, int | None, int] | Malformed:
        """One update ``(data, time, diff)`` (data a tuple) validated and converted, or why not."""
        return self._validator.check(item, index)  # type: ignore[attr-defined, no-any-return]

    @property
    def field_types(self) -> tuple[str, ...] | None:
        if self.fields is None:
            return None
        if isinstance(self.fields, Mapping):
            return tuple(self.fields.values())
        return tuple("any" for _ in self.fields)

    @property
    def field_names(self) -> tuple[str, ...] | None:
        return None if self.fields is None else tuple(self.fields)


def _check_field(kind: str, value: Any) -> Any:
    """The field value converted for `kind`, or raise TypeError."""
    if kind == "any":
        return value
    if kind == "float":
        if type(value) is float:
            return value
        if type(value) is int:  # outside int64 it stays an int, refused as out of range
            return float(value) if T_MIN <= value <= T_MAX else value
    elif type(value) is _EXACT.get(kind):
        return value
    raise TypeError(kind)


# the field kinds whose values are accepted only as exactly this Python type (bool is not an int)
_EXACT: dict[str, type] = {"int": int, "str": str, "bytes": bytes, "bool": bool}


class _Validator:
    """Validates one decoded update against an `InputFormat`; hot path kept flat."""

    def __init__(self, fmt: InputFormat) -> None:
        self.types = fmt.field_types
        self.names = fmt.field_names
        self.arity = None if self.types is None else len(self.types)
        self.all_any = self.types is None or all(t == "any" for t in self.types)
        self.time_required = fmt.time_required
        # declared fields: batches are decoded straight into columns (`kernels.unpack`)
        self.kinds = None
        self.all_int = False
        if self.types is not None:
            self.kinds = np.array([_KINDS[t] for t in self.types], dtype=np.int64)
            self.all_int = all(t == "int" for t in self.types)

    def check(self, item: Any, index: int | None) -> tuple[Any, int | None, int] | Malformed:
        if type(item) is not tuple or len(item) != 3:
            size = len(item) if type(item) is tuple else None
            what = f"an array of {size}" if size is not None else type(item).__name__
            return Malformed("arity", f"expected [data, time, diff], got {what}", index)
        data, time, diff = item
        if type(diff) is not int:
            return Malformed("diff_type", f"diff {diff!r} is a {type(diff).__name__}, not an integer", index)
        if diff == 0:
            return Malformed("zero_diff", "diff is 0", index)
        if not T_MIN <= diff <= T_MAX:
            return Malformed("diff_range", f"diff {diff} is outside int64", index)
        if type(time) is not int:
            if time is None and not self.time_required:
                pass
            else:
                return Malformed("time_type", f"time {time!r} is a {type(time).__name__}, not an integer", index)
        elif not T_MIN <= time <= T_MAX:
            return Malformed("time_range", f"time {time} is outside int64", index)
        if type(data) is not tuple:
            return Malformed("field_type", f"data {data!r} is a {type(data).__name__}, not an array", index)
        if self.arity is not None and len(data) != self.arity:
            return Malformed(
                "arity", f"data has {len(data)} fields, expected {self.arity} ({', '.join(self.names or ())})", index
            )
        if not self.all_any:
            assert self.types is not None and self.names is not None
            converted = []
            for name, kind, value in zip(self.names, self.types, data):
                try:
                    converted.append(_check_field(kind, value))
                except TypeError:
                    return Malformed(
                        "field_type", f"field {name!r} = {value!r} is a {type(value).__name__}, expected {kind}", index
                    )
            data = tuple(converted)
        try:
            hash(data)
        except TypeError:
            return Malformed("field_type", f"data {data!r} holds a map or another unhashable value", index)
        bad = out_of_range(data)
        if bad is not None:
            return Malformed("field_range", f"data {data!r:.80}: {describe(bad)}", index)
        return (data, time, diff)

    def check_batch(self, items: tuple[Any, ...]) -> tuple[tuple, tuple, tuple] | None:
        """All updates of a batch as columns ``(datas, times, diffs)`` when every one is valid
        (checked column-wise at C speed; ``datas`` converted), else None: `check` then finds the
        bad ones one by one."""
        if set(map(type, items)) != {tuple} or set(map(len, items)) != {3}:
            return None
        datas, times, diffs = zip(*items)
        if not self.check_times(times, diffs) or set(map(type, datas)) != {tuple}:
            return None
        if self.arity is not None and set(map(len, datas)) != {self.arity}:
            return None
        if self.all_any:
            return (datas, times, diffs) if self.check_records(datas) else None
        columns = list(zip(*datas))
        checked = self.check_columns(columns)
        if checked is None:
            return None
        if any(new is not old for new, old in zip(checked, columns)):
            datas = tuple(zip(*checked))
        return datas, times, diffs

    def check_times(self, times: Sequence[Any], diffs: Sequence[Any]) -> bool:
        """Whether every time is an int64 integer (or, where no time is required, every one is
        None) and every diff a non-zero int64 integer."""
        time_types = set(map(type, times))
        if time_types == {int}:
            if min(times) < T_MIN or max(times) > T_MAX:
                return False
        elif self.time_required or time_types != {type(None)}:
            return False
        return set(map(type, diffs)) == {int} and 0 not in diffs and min(diffs) >= T_MIN and max(diffs) <= T_MAX

    @staticmethod
    def check_records(records: Sequence[Any]) -> bool:
        """Whether every record is hashable and holds only values outputs can carry."""
        try:
            set(records)
        except TypeError:
            return False
        return column_in_range(records)

    def check_columns(self, columns: list[Sequence[Any]]) -> list[Sequence[Any]] | None:
        """The declared fields' columns (one per field, of one length) converted (an int in a
        float field becomes a float: that column is replaced) when every value is valid, else None."""
        assert self.types is not None
        columns = list(columns)
        for i, kind in enumerate(self.types):
            if kind == "any":
                if not self.check_records(columns[i]):
                    return None
                continue
            kinds = set(map(type, columns[i]))
            if (kind == "int" or kind == "float") and not column_in_range(columns[i]):
                return None
            if kind == "float" and kinds <= {float, int}:
                if int in kinds:
                    columns[i] = tuple(map(float, columns[i]))
            elif kinds != {_TYPES[kind]}:
                return None
        return columns


_TYPES = {"int": int, "float": float, "str": str, "bytes": bytes, "bool": bool}


_KINDS = {"int": 0, "float": 1, "bool": 2, "str": 3, "bytes": 4, "any": 5}  # kernels.unpack's kinds


