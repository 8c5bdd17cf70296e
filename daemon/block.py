"""A block: updates as columns, the way they travel from a message to the engine and back.

A block holds ``records`` (a list of records, an ``(n, k)`` int64 array whose row ``i`` is the
tuple of record ``i``'s int fields, an ``(n,)`` int64 array of records that are plain ints, or the
records field by field as `RecordColumns`), ``times`` and ``diffs`` (int64 arrays of length ``n``).
A batch message of an input with declared fields is decoded straight into columns (an array block
when every field is an ``int``, `RecordColumns` otherwise: no Python object per update) and fed to
the engine as one call (`InputSession.update_many` interns the records column by column); other
messages give list blocks. An output's epoch leaves the engine as a block too
(`Capture.drain_columns`), an array block when its records are ints or pairs of ints, which the
msgpack format encodes in one compiled pass. `rows` turns a block back into ``(data, time, diff)``
tuples for what needs them (late updates, the json and debezium formats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..operators.input import RecordColumns

__all__ = ["Block"]

Update = tuple[Any, int, int]
_EMPTY = np.empty(0, dtype=np.int64)


class Block:
    """``len(block)`` updates of one input, as columns (see the module docstring)."""

    __slots__ = ("records", "times", "diffs")

    def __init__(self, records: list | np.ndarray | RecordColumns, times: np.ndarray, diffs: np.ndarray) -> None:
        self.records = records
        self.times = times
        self.diffs = diffs

    @classmethod
    def from_rows(cls, updates: Sequence[Update], *, time: int | None = None) -> Block:
        """A list block of ``(data, time, diff)`` tuples (times and diffs ints within int64); with
        ``time``, every update at that time instead (a reclocked input's, whose own may be None)."""
        if not updates:
            return cls([], _EMPTY, _EMPTY)
        records, times, diffs = zip(*updates, strict=True)
        column = np.full(len(records), time, dtype=np.int64) if time is not None else np.array(times, dtype=np.int64)
        return cls(list(records), column, np.array(diffs, dtype=np.int64))

    @classmethod
    def of(cls, updates: Block | Sequence[Update]) -> Block:
        """``updates`` as a block: a block as it is, ``(data, time, diff)`` tuples as a list block."""
        return updates if isinstance(updates, Block) else cls.from_rows(list(updates))

    @classmethod
    def concat(cls, blocks: Sequence[Block]) -> Block:
        """One block of ``blocks`` in order (an array block when they all are, of one width)."""
        blocks = [b for b in blocks if len(b)] or list(blocks[:1])
        if len(blocks) == 1:
            return blocks[0]
        times = np.concatenate([b.times for b in blocks])
        diffs = np.concatenate([b.diffs for b in blocks])
        arrays = [b.records for b in blocks if isinstance(b.records, np.ndarray)]
        if len(arrays) == len(blocks) and len({a.shape[1:] for a in arrays}) == 1:
            return cls(np.concatenate(arrays), times, diffs)
        fields = [b.field_columns() for b in blocks]
        if None not in fields and len({len(f.columns) for f in fields}) == 1:  # type: ignore[union-attr]
            return cls(RecordColumns.concat(fields), times, diffs)  # type: ignore[arg-type]
        records: list = []
        for b in blocks:
            records.extend(b.records if type(b.records) is list else b.record_list())
        return cls(records, times, diffs)

    def __len__(self) -> int:
        return len(self.times)

    def field_columns(self) -> RecordColumns | None:
        """The records field by field, when they are tuples of one length: `RecordColumns` as they
        are, an array's columns, a list of tuples transposed (one pass at C speed); else None."""
        records = self.records
        if type(records) is RecordColumns:
            return records
        if isinstance(records, np.ndarray):
            return RecordColumns([records[:, j] for j in range(records.shape[1])]) if records.ndim == 2 else None
        if records and set(map(type, records)) == {tuple} and len(set(map(len, records))) == 1 and records[0]:
            return RecordColumns(list(map(list, zip(*records))))
        return None

    def record_list(self) -> list:
        """The records as Python values (tuples, or ints for a one-dimensional array)."""
        if type(self.records) is RecordColumns:
            return self.records.tuples()
        if isinstance(self.records, np.ndarray):
            if self.records.ndim == 1:
                return self.records.tolist()
            return list(map(tuple, self.records.tolist()))
        return self.records

    def slice(self, start: int, end: int) -> Block:
        """The updates ``start`` to ``end`` (a view where the columns are arrays)."""
        records = self.records.slice(start, end) if type(self.records) is RecordColumns else self.records[start:end]
        return Block(records, self.times[start:end], self.diffs[start:end])

    def take(self, index: np.ndarray) -> Block:
        """The updates at ``index`` (a boolean mask or positions), in order."""
        records = self.records[index] if isinstance(self.records, np.ndarray) else self.records.take(index) \
            if type(self.records) is RecordColumns else \
            [self.records[i] for i in (np.flatnonzero(index) if index.dtype == bool else index).tolist()]
        return Block(records, self.times[index], self.diffs[index])

    def rows(self) -> list[Update]:
        """The updates as ``(data, time, diff)`` tuples."""
        return list(zip(self.record_list(), self.times.tolist(), self.diffs.tolist(), strict=True))

    def at(self, time: int) -> Block:
        """The same updates, all at ``time`` (a reclocked input's arrival time)."""
        return Block(self.records, np.full(len(self), time, dtype=np.int64), self.diffs)
