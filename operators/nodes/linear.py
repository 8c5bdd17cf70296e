"""Linear operators: each output update depends on one input update, so they act at once on every
update they receive (no need to wait for complete times) and never hold state.

``map``, ``filter``, ``flat_map``, ``negate``, ``concat`` (a node with several ports), ``inspect`` and the
ingress/egress adapters of loops (``Enter`` extends times with a zero loop counter).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frontier import Antichain
from ..graph import Node, Scope
from ..lattice import to_scalar
from ..traces.batch import Updates, by_width, concat, consolidate
from ..errors import DataflowError, UserFunctionError
from ..values.memo import Memo
from ..graph import locate_failure
from .calls import call_all, failure
from .records import MapBuilder, PredicateBuilder, shape_of


class Linear(Node):
    """A node that transforms every buffered batch as soon as it is stepped.

    A linear node whose ``apply`` keeps the records as they are (``pair_columns`` set: a concat, a
    negation, a loop's ingress) takes pair records as two id columns too, and hands them on as
    they are (``Node.emit_pairs``)."""

    def step(self, frontier: Antichain) -> None:
        buffers = self.buffers
        if len(buffers) == 1:
            parts, buffers[0] = buffers[0], []
        else:
            parts = [u for buf in buffers for u in buf]
            self.buffers = [[] for _ in buffers]
        if parts:
            for group in by_width(parts):  # (pair columns only where ``pair_columns`` let them in)
                self.emit_records(self.apply(group[0] if len(group) == 1 else concat(group)))

    def apply(self, u: Updates) -> Updates:
        return u


class Concat(Linear):
    """The union of its ports' collections."""

    pair_columns = True


class Negate(Linear):
    pair_columns = True

    def apply(self, u: Updates) -> Updates:
        return u.negate()


class Memoized(Linear):
    """A linear node applying a deterministic per-record function, computed once per distinct record:
    from id columns where ``columns`` (a :class:`MapBuilder` or :class:`PredicateBuilder` of the
    function's shape) builds the results, by calling the function for the other records."""

    dtype: type = np.int64
    columns: MapBuilder | PredicateBuilder | None = None

    def __init__(self, scope: Scope, f: Callable, name: str) -> None:
        super().__init__(scope, name=name)
        self.f = f
        self.memo = self.interner.cache(Memo(self._compute, self.dtype, limit=self.tuning.memo_limit))

    def _compute(self, ids: np.ndarray) -> np.ndarray:
        columns = self.columns
        if columns is None or columns.shape is None:
            return self._call(ids)
        out, built = columns(ids)
        if built is not None and not built.all():
            rest = ~built
            out[rest] = self._call(ids[rest])
        return out

    def _call(self, ids: np.ndarray) -> np.ndarray:
        """The function of the records ``ids``: one Python call each, in chunks of :meth:`_chunk`."""
        out = np.empty(len(ids), dtype=self.dtype)
        chunk = self.tuning.user_chunk
        for lo in range(0, len(ids), chunk):
            out[lo : lo + chunk] = self._chunk(ids[lo : lo + chunk])
        return out

    def _chunk(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _memo(self, u: Updates) -> np.ndarray:
        """The memo's results for the records of ``u``; a user function's failure names the record's
        time (raised, or taken by the quarantine)."""
        quarantine = self.scope.context.quarantine
        taken = 0 if quarantine is None else len(quarantine.failed)
        try:
            results = self.memo(u.data[0])
        except UserFunctionError as exc:
            _time_of(exc, u)
            raise
        if quarantine is not None:
            for exc in quarantine.failed[taken:]:
                _time_of(exc, u)
                locate_failure(exc, self)
        return results


def _time_of(exc: UserFunctionError, u: Updates) -> None:
    """Name the time of ``exc``'s record, the first in ``u``, if it is not named yet."""
    if exc.time is None and exc.record_id is not None:
        at = np.flatnonzero(u.data[0] == exc.record_id)
        if len(at):
            exc.time = to_scalar(u.times[int(at[0])])


_ABSENT = object()  # the result of a record whose function raised, under the dead_letter policy


class Map(Memoized):
    """``f(record)`` for every record."""

    dtype = np.int32  # record ids fit 31 bits

    def __init__(self, scope: Scope, f: Callable) -> None:
        super().__init__(scope, f, "map")
        self.columns = MapBuilder(self.interner, shape_of(f, 1, items=True))  # when f only rearranges or counts
        self.pair_columns = self.columns.from_pairs  # pair records as two columns: built, no Python
        if self.pair_columns:
            self.pair_items = self.columns.items_read
        self._columns_out: bool | None = None  # see _builds_columns

    def step(self, frontier: Antichain) -> None:
        """Every buffered batch: those of record ids through :meth:`apply`, those of pair columns
        built from their columns (handed on as pair columns when the function builds pairs). Record
        ids that are all pairs are built from their columns too, when every consumer takes what that
        gives (:meth:`_builds_columns`): then no pair is interned and no memo consulted."""
        parts, self.buffers[0] = self.buffers[0], []
        for group in by_width(parts) if parts else ():
            u = group[0] if len(group) == 1 else concat(group)
            if len(u.data) == 1:
                built = self._built_from_pair_ids(u) if self._builds_columns() else None
                if built is None:
                    self.emit(self.apply(u))
                else:
                    self.emit_records(built)
                continue
            built = self.columns.pairs(*u.data)
            if built is None:  # some record's arithmetic needs the Python call: mapped by its id
                self.emit(self.apply(Updates((self.interner.pair(*u.data),), u.times, u.diffs)))
            else:
                self.emit_records(Updates(built, u.times, u.diffs))

    def _builds_columns(self) -> bool:
        """Whether batches of record ids that are pairs go through :meth:`_built_from_pair_ids`: the
        function reads only their items and constants, computes no arithmetic (which may need the
        Python call), and builds a single value or a pair that every consumer takes as two columns
        (``Node.pair_columns``; a pair would be interned for any other). Decided at the first step:
        the graph is fixed once running."""
        if self._columns_out is None:
            columns = self.columns
            self._columns_out = bool(columns.from_pairs and not columns.arith and (
                columns.shape[0] != "tuple" or all(node.pair_columns for node, _port in self.consumers)))
        return self._columns_out

    def _built_from_pair_ids(self, u: Updates) -> Updates | None:
        """``u``'s outputs built from the columns of its records, which name pairs (``None`` when
        one does not: the batch is then mapped by its ids)."""
        is_pair, firsts, seconds = self.interner.plain_pairs(u.data[0])
        if False in is_pair:
            return None
        return Updates(self.columns.pairs(firsts, seconds), u.times, u.diffs)

    def _call(self, ids: np.ndarray) -> np.ndarray:
        """Ids of ``f`` of the records ``ids``: one Python call each, in chunks."""
        interner, f, chunk = self.interner, self.f, self.tuning.user_chunk
        quarantine = self.scope.context.quarantine
        absent: list[int] = []  # positions of records whose function raised (dead_letter): id -1

        def chunks():
            for lo in range(0, len(ids), chunk):
                known: list = []  # the input values (and their parts): outputs reusing them skip lookups
                values = interner.value_list(ids[lo : lo + chunk], known)
                out = call_all("map", f, (values,), ids[lo : lo + chunk], quarantine, _ABSENT)
                if quarantine is not None and any(v is _ABSENT for v in out):
                    for i in [i for i, v in enumerate(out) if v is _ABSENT]:
                        out[i] = None
                        absent.append(lo + i)
                yield out, known

        results = interner.ids_of_chunks(chunks())
        if absent:
            results[absent] = -1
        return results

    def apply(self, u: Updates) -> Updates:
        results = self._memo(u)
        if self.scope.context.quarantine is not None:
            kept = results >= 0
            if not kept.all():
                return u.take(kept).with_data(results[kept])
        return u.with_data(results)


class Filter(Memoized):
    """Records for which ``p(record)`` is true."""

    dtype = np.int8

    def __init__(self, scope: Scope, p: Callable) -> None:
        super().__init__(scope, p, "filter")
        self.columns = PredicateBuilder(self.interner, p)  # decides from id columns when p compares ints

    def _chunk(self, ids: np.ndarray) -> np.ndarray:
        kept = call_all("filter", self.f, (self.interner.value_list(ids),), ids, self.scope.context.quarantine, False)
        if set(map(type, kept)) != {bool}:
            kept = list(map(bool, kept))
        return np.array(kept, dtype=np.int8)

    def apply(self, u: Updates) -> Updates:
        return u.take(self._memo(u).astype(bool))


class FlatMap(Linear):
    def __init__(self, scope: Scope, f: Callable) -> None:
        super().__init__(scope, name="flat_map")
        self.f = f

    def apply(self, u: Updates) -> Updates:
        f = self.f
        outs: list[object] = []
        counts = []
        for i, v in enumerate(self.interner.value_list(u.data[0])):
            before = len(outs)
            try:
                outs.extend(f(v))
            except DataflowError:
                raise
            except Exception as exc:
                error = failure("flat_map", f, exc, record=v, record_id=int(u.data[0][i]), time=to_scalar(u.times[i]))
                locate_failure(error, self)
                quarantine = self.scope.context.quarantine
                if quarantine is None or not quarantine.takes(error):
                    raise error from exc
                del outs[before:]  # what it gave before raising
            counts.append(len(outs) - before)
        rep = np.asarray(counts, dtype=np.int64)
        return Updates((self.interner.ids(outs),), np.repeat(u.times, rep, axis=0), np.repeat(u.diffs, rep))


class Inspect(Linear):
    def __init__(self, scope: Scope, f: Callable) -> None:
        super().__init__(scope, name="inspect")
        self.f = f

    def apply(self, u: Updates) -> Updates:
        for v, t, d in zip(self.interner.value_list(u.data[0]), u.times.tolist(), u.diffs.tolist()):
            try:
                self.f((v, to_scalar(t), d))
            except DataflowError:
                raise
            except Exception as exc:
                raise failure("inspect", self.f, exc, record=(v, to_scalar(t), d), time=to_scalar(t)) from exc
        return u


class Consolidate(Node):
    """Waits for complete times, then emits the consolidated updates."""

    def step(self, frontier: Antichain) -> None:
        self.emit(consolidate(self.take_complete(frontier)))


class Enter(Linear):
    """Ingress into a loop scope: times gain a loop counter of 0."""

    pair_columns = True

    def __init__(self, scope: Scope, source: Node | None = None) -> None:
        super().__init__(scope, name="enter", first=True)
        self.source = source  # the outer node whose collection this brings in (names it)

    @property
    def label(self) -> str:
        """The entered collection's label (``edges``, not ``enter``), unless named itself."""
        return self._label or (self.source.label if self.source is not None else self.name)

    @label.setter
    def label(self, value: str) -> None:
        self._label = value

    def apply(self, u: Updates) -> Updates:
        times = np.concatenate([u.times, np.zeros((len(u), 1), dtype=np.int64)], axis=1)
        return u.with_times(times)

    def pending_times(self) -> np.ndarray:
        parts = [self.apply(u).times for buf in self.buffers for u in buf]
        return np.concatenate(parts) if parts else np.empty((0, self.scope.depth), dtype=np.int64)
