"""Input sessions: where updates ``(record, time, diff)`` enter a dataflow, with the frontier promise.

``advance_to(t)`` promises that no later update has a time ``< t``; ``close()`` promises no more
updates at all. Updates are validated as they are given (time an int64 not behind the frontier, diff a
non-zero int) so bad input fails at the call that made it, with the offending value in the message.
Many updates enter as columns (`InputSession.update_many`), their records as one array or list, or
field by field as `RecordColumns`, which is how the daemon feeds what it decodes: no Python tuple
per update on the way.
"""

from __future__ import annotations

import numpy as np

from .errors import DiffError, GraphError, ShapeError, TimeError
from .frontier import Antichain
from .graph import Node, Scope
from .lattice import T_MAX, T_MIN
from .traces.batch import Updates, concat


def check_time(time: object, what: str = "time") -> int:
    if isinstance(time, bool) or not isinstance(time, (int, np.integer)):
        raise TimeError(f"{what} must be an int (nanoseconds), got {time!r}")
    t = int(time)
    if not T_MIN <= t <= T_MAX:
        raise TimeError(f"{what} {t} is outside int64")
    return t


def check_diff(diff: object) -> int:
    if isinstance(diff, bool) or not isinstance(diff, (int, np.integer)):
        raise DiffError(f"diff must be a non-zero int, got {diff!r}")
    if diff == 0:
        raise DiffError("diff must be non-zero, got 0")
    if not T_MIN <= diff <= T_MAX:
        raise DiffError(f"diff {int(diff)} is outside int64")
    return int(diff)


class RecordColumns:
    """Records given field by field: record ``i`` is the tuple ``(columns[0][i], ..., columns[k-1][i])``.

    Each column is an integer numpy array (its values are Python ints) or a list of hashable
    values; all have one length, and there is at least one. `InputSession.update_many` interns such
    records column by column (`ddflow.operators.values.interner.Interner.record_ids`): a record of
    two fields is the pair of its columns' ids, with no tuple built. `tuples` builds the records
    (for what needs them one by one: an error message, a late update)."""

    __slots__ = ("columns",)

    def __init__(self, columns: list[np.ndarray | list]) -> None:
        if not columns:
            raise ShapeError("record columns: records need at least one field")
        for c in columns:
            if isinstance(c, np.ndarray) and (c.ndim != 1 or c.dtype.kind not in "iu"):
                raise ShapeError(f"record columns: an array column must be one-dimensional of integers, got {c.dtype} "
                                 f"of shape {c.shape}")
        if len({len(c) for c in columns}) != 1:
            raise ShapeError(f"record columns: columns of lengths {[len(c) for c in columns]}, expected one length")
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0])

    def __repr__(self) -> str:
        return f"RecordColumns({len(self.columns)} fields, {len(self)} records)"

    @classmethod
    def concat(cls, parts: list[RecordColumns]) -> RecordColumns:
        """The records of ``parts`` (all of one width) in order; a column stays an array when it is
        one in every part."""
        if len(parts) == 1:
            return parts[0]
        if len({len(p.columns) for p in parts}) != 1:
            raise ShapeError(f"record columns: cannot join records of {sorted({len(p.columns) for p in parts})} fields")
        out: list[np.ndarray | list] = []
        for j in range(len(parts[0].columns)):
            column = [p.columns[j] for p in parts]
            if all(isinstance(c, np.ndarray) for c in column):
                out.append(np.concatenate(column))
            else:
                joined: list = []
                for c in column:
                    joined.extend(c.tolist() if isinstance(c, np.ndarray) else c)
                out.append(joined)
        return cls(out)

    def take(self, index: np.ndarray) -> RecordColumns:
        """The records at ``index`` (a boolean mask or positions), in order."""
        positions = np.flatnonzero(index) if index.dtype == bool else index
        picked = positions.tolist()
        return RecordColumns([c[positions] if isinstance(c, np.ndarray) else [c[i] for i in picked]
                              for c in self.columns])

    def slice(self, start: int, end: int) -> RecordColumns:
        return RecordColumns([c[start:end] for c in self.columns])

    def tuples(self) -> list[tuple]:
        """The records as tuples (one Python object per record)."""
        return list(zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in self.columns), strict=True))

    def record(self, i: int) -> tuple:
        """Record ``i`` as a tuple."""
        return tuple(c[i].item() if isinstance(c, np.ndarray) else c[i] for c in self.columns)


class _Interned:
    """Records of an ``update_many`` chunk interned when it was given: their ids."""

    __slots__ = ("ids",)

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids


def _paired(records: list | np.ndarray | RecordColumns | _Interned) -> bool:
    """Whether ``records`` are given as two columns: an ``(n, 2)`` int array, or `RecordColumns` of
    two fields (their records are pairs)."""
    if type(records) is RecordColumns:
        return len(records.columns) == 2
    return isinstance(records, np.ndarray) and records.ndim == 2 and records.shape[1] == 2


class InputNode(Node):
    """Emits the updates given to its session."""

    observes_frontier = True  # stepped once per run to hand over what its session was given

    def __init__(self, scope: Scope, name: str) -> None:
        super().__init__(scope, name=name)
        self.records: list[object] = []
        self.times: list[int] = []
        self.diffs: list[int] = []
        # update_many's chunks: (records, times, diffs)
        self.chunks: list[tuple[list | np.ndarray | RecordColumns | _Interned, np.ndarray, np.ndarray]] = []

    def _flush(self) -> None:
        if self.records:
            self.chunks.append((self.records, np.asarray(self.times, dtype=np.int64),
                                np.asarray(self.diffs, dtype=np.int64)))
            self.records, self.times, self.diffs = [], [], []

    def step(self, frontier: Antichain) -> None:
        self._flush()
        chunks, self.chunks = self.chunks, []
        if not chunks:
            return
        if len(chunks) == 1:  # the columns as they are (each chunk's own: nothing else holds them)
            (_, times, diffs), = chunks
        else:
            times, diffs = np.concatenate([c[1] for c in chunks]), np.concatenate([c[2] for c in chunks])
        times = times.reshape(-1, 1)
        if all(_paired(c[0]) for c in chunks):  # pair records: their columns to who takes them, pair ids
            read = self._items_read()  # to the others
            pairs = [self._pair_ids(c[0], read) for c in chunks]
            columns = pairs[0] if len(pairs) == 1 else tuple(np.concatenate(p) for p in zip(*pairs))
            self.emit_pairs(Updates(columns, times, diffs))
        else:
            ids = [self._ids(c[0]) for c in chunks]
            self.emit(Updates((ids[0] if len(ids) == 1 else np.concatenate(ids),), times, diffs))

    def _items_read(self) -> tuple[int, ...]:
        """The fields of pair records some consumer reads: both, unless every consumer takes pair
        columns and reads only one of them (``Node.pair_items``)."""
        read: frozenset[int] = frozenset()
        for node, _port in self.consumers:
            if not node.pair_columns:
                return (0, 1)
            read |= node.pair_items
        return tuple(sorted(read)) or (1,)  # (none read: one column still gives the batch its length)

    def _pair_ids(self, records: np.ndarray | RecordColumns, read: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the two fields of records given as two columns (:func:`_paired`), interned as
        `_ids` does them (it pairs them). A field not in ``read`` is not interned: no consumer reads
        it, and the other field's ids stand in its column."""
        interner = self.interner
        columns = records.columns if type(records) is RecordColumns else (records[:, 0], records[:, 1])
        ids = [interner.int_ids(c) if isinstance(c, np.ndarray) else interner.ids(c) for c in
               (columns[i] for i in read)]
        return (ids[0], ids[-1])

    def _ids(self, records: list | np.ndarray | RecordColumns | _Interned) -> np.ndarray:
        if type(records) is _Interned:
            return records.ids
        if type(records) is RecordColumns:
            return self.interner.record_ids(records.columns)
        if isinstance(records, np.ndarray):
            if records.ndim == 1:
                return self.interner.int_ids(records)
            if records.shape[1] == 2:  # (int, int) records: pairs of int ids, no tuple built
                return self.interner.pair(self.interner.int_ids(records[:, 0]), self.interner.int_ids(records[:, 1]))
            return self.interner.ids(list(map(tuple, records.tolist())))
        return self.interner.ids(records)

    def holds_work(self) -> bool:
        return bool(self.records or self.chunks)

    def held_ids(self):
        yield from super().held_ids()
        for records, _times, _diffs in self.chunks:
            if type(records) is _Interned:
                yield records.ids

    def pending_times(self) -> np.ndarray:
        self._flush()
        parts = [c[1] for c in self.chunks]
        return np.concatenate(parts).reshape(-1, 1) if parts else np.empty((0, 1), dtype=np.int64)


def _int_column(values, what: str, error: type[Exception]) -> np.ndarray:
    """``values`` as an int64 column, or ``error`` naming the first value that is not an int64."""
    arr = np.asarray(values)
    if arr.ndim == 1 and (arr.dtype.kind in "iu" or len(arr) == 0):
        if arr.dtype.kind == "u" and len(arr) and arr.max() > T_MAX:
            raise error(f"{what} {int(arr.max())} is outside int64")
        return arr.astype(np.int64)
    for v in (values.tolist() if isinstance(values, np.ndarray) else values):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise error(f"{what} must be an int, got {v!r}")
        if not T_MIN <= int(v) <= T_MAX:
            raise error(f"{what} {int(v)} is outside int64")
    raise error(f"{what}s must be a flat sequence of ints")


def _record(records: list | np.ndarray | RecordColumns, i: int) -> object:
    if type(records) is RecordColumns:
        return records.record(i)
    if isinstance(records, np.ndarray):
        return records[i].item() if records.ndim == 1 else tuple(records[i].tolist())
    return records[i]


class InputSession:
    """The handle users feed: ``insert``, ``remove``, ``update``, ``advance_to``, ``close``."""

    def __init__(self, node: InputNode, collection) -> None:
        self._node = node
        self.collection = collection
        self.name = node.name
        self._frontier: int | None = T_MIN  # None once closed
        self._state: InputState | None = None

    @property
    def frontier(self) -> Antichain:
        """The input frontier as an antichain (empty once closed)."""
        return Antichain() if self._frontier is None else Antichain([(self._frontier,)])

    @property
    def time(self) -> int | None:
        """The current input frontier (``None`` once closed)."""
        return self._frontier

    def insert(self, record: object, time: int) -> None:
        """Add one copy of ``record`` at ``time`` (diff +1)."""
        # the common case checked inline (an int time at or after the open frontier), the rest by update
        if type(time) is int and self._frontier is not None and self._frontier <= time <= T_MAX:
            node = self._node
            node.records.append(record)
            node.times.append(time)
            node.diffs.append(1)
        else:
            self.update(record, time, 1)

    def remove(self, record: object, time: int) -> None:
        """Remove one copy of ``record`` at ``time`` (diff -1)."""
        self.update(record, time, -1)

    def update(self, record: object, time: int, diff: int = 1) -> None:
        """Change the multiplicity of ``record`` by ``diff`` (a non-zero int) at ``time`` (not behind the frontier)."""
        t = check_time(time)
        d = check_diff(diff)
        if self._frontier is None:
            raise GraphError(f"input {self.name!r} is closed; cannot update {record!r}")
        if t < self._frontier:
            raise TimeError(f"input {self.name!r}: time {t} is behind the input frontier {self._frontier}")
        node = self._node
        node.records.append(record)
        node.times.append(t)
        node.diffs.append(d)

    def update_many(self, records, times, diffs) -> None:
        """Many updates at once, validated as whole columns; all are rejected if any is invalid.

        ``records`` may be an integer numpy array: one-dimensional, its records are Python ints;
        two-dimensional ``(n, k)``, record ``i`` is the tuple of row ``i``'s ints (``k >= 1``). Such
        records are interned from the columns, without a Python object per record (for ``k == 1``
        and ``k > 2``, tuples are built in bulk). ``records`` may also be `RecordColumns` (records
        given field by field, interned column by column). The columns are copied or interned here:
        the caller may reuse its arrays at once (a one-dimensional records array is interned, not
        copied, when no earlier update of this input waits for the dataflow to run)."""
        ints = False  # a column of ints: interned once validated (its ids are the copy kept)
        if type(records) is RecordColumns:
            records = RecordColumns([c.copy() for c in records.columns])
        elif isinstance(records, np.ndarray) and records.ndim in (1, 2) and records.dtype.kind in "iu":
            if records.ndim == 2 and records.shape[1] == 0:
                raise ShapeError("update_many: a two-dimensional records array needs at least one column")
            ints = records.ndim == 1
            if not ints:
                records = records.copy()
        else:
            records = list(records)
        t = _int_column(times, "time", TimeError)
        d = _int_column(diffs, "diff", DiffError)
        if not len(records) == len(t) == len(d):
            raise ShapeError(f"update_many: {len(records)} records, {len(t)} times, {len(d)} diffs")
        if self._frontier is None:
            raise GraphError(f"input {self.name!r} is closed; cannot update")
        if len(t) == 0:
            return
        if (d == 0).any():
            i = int(np.flatnonzero(d == 0)[0])
            raise DiffError(f"diff must be non-zero, got 0 for record {_record(records, i)!r}")
        if t.min() < self._frontier:
            i = int(np.argmin(t))
            raise TimeError(f"input {self.name!r}: time {int(t[i])} of record {_record(records, i)!r} is behind "
                            f"the input frontier {self._frontier}")
        node = self._node
        node._flush()
        if ints:  # interned now when no update given before waits to be (ids follow the order of updates)
            records = _Interned(node.interner.int_ids(records)) if not node.chunks else records.copy()
        node.chunks.append((records, t, d))

    def advance_to(self, time: int) -> None:
        """Promise that no later update has a time before ``time`` (the frontier never goes back)."""
        t = check_time(time, "advance_to time")
        if self._frontier is None:
            raise GraphError(f"input {self.name!r} is closed; cannot advance_to({t})")
        if t < self._frontier:
            raise TimeError(f"input {self.name!r}: advance_to({t}) is behind the frontier {self._frontier}")
        self._frontier = t

    def close(self) -> None:
        """Promise no more updates at all: the input stops holding the dataflow's frontier back."""
        self._frontier = None

    def state(self) -> InputState:
        """This input's updates accumulated in the engine (`InputState`), made on the first call,
        which must come before the dataflow first runs."""
        if self._state is None:
            self._state = InputState(self)
        return self._state


class InputState:
    """An input's updates accumulated in the engine, for whoever must save them (a checkpoint).

    Made by `InputSession.state` before the dataflow first runs: an arrangement of the session's
    own updates (before any exchange: what this dataflow was given), whose trace compacts to the
    input frontier, so it holds each record once with its count, not its history. `read` gives
    the input at the frontier the dataflow last ran to: ``base``, the collection accumulated over
    every time before it, and ``pending``, the updates given at later times (they wait in the
    arrangement for their time). Nothing else keeps a copy of the input for this.
    """

    def __init__(self, session: InputSession) -> None:
        from .nodes.arrange import Arrange

        node = session._node
        self.name = session.name
        self._node = node
        self._arrange = Arrange(node.scope, by_self=True, name=f"{session.name}.state")
        node.connect(self._arrange)

    @property
    def frontier(self) -> int:
        """The frontier the dataflow last ran to: ``base`` holds every time before it."""
        return int(self._arrange.trace.upper.elements[0][0]) if self._arrange.trace.upper.elements else T_MAX

    def base_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, counts)``: the interned records accumulated before `frontier`, each once, counts
        non-zero. Raises :class:`DiffError` naming the record when a count is outside int64."""
        u = self._arrange.trace.contents()
        times = np.zeros((len(u), 1), dtype=np.int64)
        try:
            acc = Updates((u.data[0],), times, u.diffs).consolidate()
        except DiffError as exc:
            record = self._node.interner.value(exc.record_ids[0]) if exc.record_ids else None
            raise DiffError(f"input {self.name!r}: the count of {record!r} before time {self.frontier} is outside "
                            "int64", record_ids=exc.record_ids, operator=self.name) from exc
        return acc.data[0], acc.diffs

    def read(self) -> tuple[list, np.ndarray, list[tuple[object, int, int]]]:
        """``(records, counts, pending)``: the input at `frontier` (see the class docstring), the
        records as values; ``pending`` as consolidated ``(record, time, diff)``."""
        ids, counts = self.base_ids()
        interner = self._node.interner
        buffered = [u for u in self._arrange.buffers[0] if len(u)]
        pending: list[tuple[object, int, int]] = []
        if buffered:
            later = concat(buffered).consolidate()
            pending = list(zip(interner.value_list(later.data[0]), later.times[:, 0].tolist(), later.diffs.tolist()))
        return interner.value_list(ids), counts, pending
