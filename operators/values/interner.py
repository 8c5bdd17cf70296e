"""Record ids: every distinct Python value a dataflow holds is interned to an int64 id.

Batches and arrangements then hold only integer columns, so consolidation, sorting and lookups are
pure numpy and compiled kernels (the 2018 post's interning and row ids). Equality is Python equality:
equal values get one id, whose value is the first of them seen.

Values are stored by kind (:mod:`ddflow.operators.values.ids`), in columns rather than as Python
objects, so that interning a batch costs a few passes and one compiled hash-table call per level
rather than a dict operation per value, and interned records cost bytes, not objects: ints (those
that fit in an int64) by their value, plain 2-tuples as the pair of their components' ids (a
``(key, val)`` record is therefore split into its key and val ids by a gather, and ``pair`` builds
records from id columns without touching Python), and every other value as an object in a dict. A
tuple is rebuilt from its components when its value is asked for. Values that equal an int or a
plain 2-tuple without being one (``True``, ``1.0``, a named tuple) are kept as objects, and hold the
int's or pair's id when they come first.

Ids live as long as some state holds them: :meth:`Interner.reclaim` gives back the ids that the
dataflow's state no longer reaches (see :mod:`ddflow.operators.values.sweep`). An id obtained from
:meth:`Interner.id` (one value: a constant a node keeps, such as the unit ``()``) is never given back.
Caches keyed by ids (memos, record builders) register with :meth:`Interner.cache` and are cleared
whenever ids are given back.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from itertools import count as count_from
from operator import is_, itemgetter

import numpy as np

from ..tuning import DEFAULT
from ..errors import ShapeError
from ..kernels import columns
from ..partition import combine, element_hash, finish, int_elements
from .equality import (
    I64_MAX, I64_MIN, NEVER_INT, Unhashable, all_equal, all_plain, distinct, distinct_rows, int_equal, plain,
)
from .ids import COMPOSITE, ID_LIMIT, INT, LOW, OBJ, OBJ_INT, OBJ_PAIR, PAIR, SHIFT, IdSpace, pack, unpack

_INT_KINDS = np.array([INT, OBJ_INT], dtype=np.int64)  # ids whose payload is their int
_PAIR_KINDS = np.array([PAIR, OBJ_PAIR], dtype=np.int64)  # ids whose payload is a pair code

_DEEP = 64  # nesting below which tuples are interned level by level in bulk
_PENDING = 1 << 24  # values decomposed into columns before they are interned together
_SMALL_INT = 1 << 62  # int_values: ints whose negation and differences stay in int64
_PACK_SLICE = 1 << 20  # pair_into packs this many pair codes at a time

_first, _second = itemgetter(0), itemgetter(1)


class Interner:
    """Ids for hashable values; ``value_list(ids)`` maps back. ``memo_limit`` bounds the memos of the
    caches that use it (record builders); ``id_limit`` bounds the ids (tests lower it)."""

    def __init__(self, *, memo_limit: int = DEFAULT.memo_limit, id_limit: int = ID_LIMIT) -> None:
        self.memo_limit = memo_limit
        self._space = IdSpace(limit=id_limit)
        self._objects: dict[int, object] = {}  # id of an OBJ, OBJ_INT or OBJ_PAIR -> the object
        self._object_ids: dict[object, int] = {}  # object -> its id (also objects equal to an int or pair)
        self._aliases: list[object] = []  # objects in _object_ids whose id is an INT's or a PAIR's
        self._pinned: set[int] = set()
        self._caches: weakref.WeakSet = weakref.WeakSet()
        self.reclaimed = 0  # ids given back so far
        self.sweeps = 0  # reclaims run so far
        self.live_after_sweep = 0  # ids in use after the last reclaim

    def __len__(self) -> int:
        """Ids in use."""
        return self._space.in_use()

    def nbytes(self) -> int:
        """Bytes of the id columns and tables (not counting the Python objects of the dicts)."""
        return self._space.nbytes() + 8 * len(self._objects)

    def stats(self) -> dict[str, int]:
        """``{"ids", "id_bound", "objects", "int_capacity", "pair_capacity", "bytes", "reclaimed",
        "sweeps"}``: ids in use, ids below the high-water mark, objects kept, hash table buckets."""
        space = self._space
        return {"ids": space.in_use(), "id_bound": space.next, "objects": len(self._objects),
                "int_capacity": len(space.ints.slots), "pair_capacity": len(space.pairs.slots),
                "bytes": self.nbytes(), "reclaimed": self.reclaimed, "sweeps": self.sweeps}

    # -- values -> ids ----------------------------------------------------------------------------
    def id(self, value: object) -> int:
        """The id of one value, kept for the interner's life (a constant a node holds)."""
        i = int(self.ids([value])[0])
        self._pinned.add(i)
        return i

    def ids(self, values: Iterable[object], known: list | None = None) -> np.ndarray:
        """Ids of many values (interning new ones).

        ``known``: ``(values, ids)`` lists materialized by :meth:`value_list`; a list (at any level
        of the tuples) made of exactly those objects takes their ids without a lookup."""
        values = values if isinstance(values, list) else list(values)
        return self._checked(values, lambda: self._intern(self._plan(values, known or (), 0)))

    def ids_of_chunks(self, chunks: Iterable[tuple[list, list]]) -> np.ndarray:
        """Ids of values given chunk by chunk, as ``(values, known)``: each chunk is decomposed into
        columns as it comes (its Python objects can go), and consecutive chunks of one shape are
        interned together (fewer, larger kernel calls)."""
        parts: list[np.ndarray] = []
        pending: list[tuple] = []
        shape: tuple | None = None
        size = 0
        for values, known in chunks:
            plan = self._checked(values, lambda: self._plan(values, known, 0))
            mine = _shape(plan)
            if pending and (mine != shape or size >= _PENDING):
                parts.append(self._intern(_concat(pending)))
                pending.clear()
                size = 0
            if mine is None:  # order matters: interned now, with its values at hand for errors
                parts.append(self._checked(values, lambda: self._intern(plan)))
            else:
                pending.append(plan)
                shape, size = mine, size + _length(plan)
        plan = values = known = ()  # drop the last chunk's objects before the tables grow
        if pending:
            parts.append(self._intern(_concat(pending)))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    @staticmethod
    def _checked(values: list, work: Callable):
        try:
            return work()
        except Unhashable as exc:
            for v in values:
                try:
                    hash(v)
                except TypeError:
                    raise ShapeError(f"record {v!r} is not hashable") from exc
            raise ShapeError(f"a record is not hashable: {exc}") from exc

    def int_ids(self, values: np.ndarray) -> np.ndarray:
        """Ids of the ints of an integer array (interned as Python ints)."""
        if values.dtype.kind == "u" and len(values) and int(values.max()) > I64_MAX:
            return self.ids(values.tolist())
        return self._int_ids(values.astype(np.int64, copy=False))

    def int_ids_into(self, values: np.ndarray) -> np.ndarray:
        """:meth:`int_ids` of an int64 column the caller gives up: the ids may be written over it (a
        large batch needs no column of ids beside it)."""
        if values.dtype != np.int64 or not values.flags.c_contiguous or not values.flags.writeable:
            return self.int_ids(values)
        space = self._space
        return space.intern(space.ints, INT, values, in_place=True)

    # A plan is a batch of values decomposed into columns, to be interned later:
    #   ("ids", ids)  values known to have these ids     ("ints", int64 array)  exact ints
    #   ("const", value, n)  n values equal to one        ("objects", list)  values of NEVER_INT types
    #   ("pairs", n, plan of the firsts, plan of the seconds)  plain 2-tuples
    #   ("values", list, known, depth)  anything else, interned kind by kind (in order when that matters)
    def _plan(self, values: list, known: Sequence, depth: int) -> tuple:
        n = len(values)
        if n == 0:
            return ("ids", np.empty(0, dtype=np.int64))
        for objs, ids in known:
            if len(objs) == n and values[0] is objs[0] and all(map(is_, values, objs)):
                return ("ids", ids)
        if n > 1 and all_equal(values):
            return ("const", values[0], n)
        types = set(map(type, values))
        if len(types) == 1:
            kind = types.pop()
            if kind is int:
                try:
                    return ("ints", np.array(values, dtype=np.int64))
                except OverflowError:
                    pass
            elif kind is tuple and depth < _DEEP and set(map(len, values)) == {2}:
                return ("pairs", n, self._plan(list(map(_first, values)), known, depth + 1),
                        self._plan(list(map(_second, values)), known, depth + 1))
            elif kind in NEVER_INT:
                return ("objects", values)
        return ("values", values, known, depth)

    def _intern(self, plan: tuple) -> np.ndarray:
        tag = plan[0]
        if tag == "ids":
            return plan[1]
        if tag == "ints":
            return self._int_ids(plan[1])
        if tag == "pairs":
            return self.pair(self._intern(plan[2]), self._intern(plan[3]))
        if tag == "const":
            return np.full(plan[2], self._intern(self._plan([plan[1]], (), 0))[0], dtype=np.int64)
        if tag == "objects":
            return self._object_ids_of(plan[1])
        return self._mixed(plan[1], plan[2], plan[3])

    def _mixed(self, values: list, known: Sequence, depth: int) -> np.ndarray:
        """Values of several kinds: each kind's values interned together."""
        ints, pairs, objects = [], [], []
        for i, v in enumerate(values):
            kind = type(v)
            if kind is int and I64_MIN <= v <= I64_MAX:
                ints.append(i)
            elif kind is tuple and len(v) == 2:
                pairs.append(i)
            else:
                objects.append(i)
        out = np.empty(len(values), dtype=np.int64)
        if objects and (ints or pairs) and not all(plain(values[i]) for i in objects):
            # an object may equal an int or a pair of the batch: in order, the first holds the id
            for i, v in enumerate(values):
                out[i] = self._one(v)
            return out
        if ints:
            out[ints] = self._int_ids(np.array([values[i] for i in ints], dtype=np.int64))
        if pairs:
            vals = [values[i] for i in pairs]
            out[pairs] = self._pair_values(vals, known, depth) if depth < _DEEP else self._deep_pairs(vals)
        if objects:
            out[objects] = self._object_ids_of([values[i] for i in objects])
        return out

    def _int_ids(self, arr: np.ndarray) -> np.ndarray:
        space = self._space
        return space.intern(space.ints, INT, arr)

    def _pair_ids(self, codes: np.ndarray) -> np.ndarray:
        space = self._space
        return space.intern(space.pairs, PAIR, codes)

    def _pair_values(self, values: list, known: Sequence, depth: int) -> np.ndarray:
        a = self._intern(self._plan(list(map(_first, values)), known, depth + 1))
        b = self._intern(self._plan(list(map(_second, values)), known, depth + 1))
        return self._pair_ids(pack(a, b))

    def _deep_pairs(self, values: list) -> np.ndarray:
        """Pairs nested too deep for bulk levels: one at a time (the same ids as in bulk)."""
        return np.array([self._one(v) for v in values], dtype=np.int64)

    def _one(self, v: object) -> int:
        if type(v) is tuple and len(v) == 2:
            a, b = self._one(v[0]), self._one(v[1])
            return int(self._pair_ids(np.array([(a << 32) | b], dtype=np.int64))[0])
        return int(self._mixed([v], (), _DEEP)[0])

    def _object_ids_of(self, values: list) -> np.ndarray:
        """Ids of values kept as objects (and of objects equal to an int or a pair): a dict lookup
        per value at C speed; values not seen yet are numbered in order of first appearance, the
        first of equal ones kept."""
        get = self._object_ids.get
        try:
            out = list(map(get, values))
        except TypeError as exc:
            raise Unhashable(str(exc)) from exc
        if None not in out:
            return np.array(out, dtype=np.int64)
        new = list(compress(values, map(is_, out, repeat(None))))
        if not all_plain(new):
            for i, got in enumerate(out):  # in order: the first of equal values holds the id
                if got is None:
                    out[i] = self._special(values[i])
            return np.array(out, dtype=np.int64)
        fresh = list(dict.fromkeys(new))
        ids = self._space.new(OBJ, np.zeros(len(fresh), dtype=np.int64))
        self._objects.update(zip(ids.tolist(), fresh))
        self._object_ids.update(zip(fresh, ids.tolist()))
        if len(fresh) == len(values):  # every value new and distinct: their ids in order
            return ids
        return np.fromiter(map(get, values), dtype=np.int64, count=len(values))

    def _special(self, v: object) -> int:
        """The id of an object that may equal an int or a plain 2-tuple."""
        i = self._object_ids.get(v)
        if i is not None:
            return i
        space = self._space
        if plain(v) or (isinstance(v, tuple) and len(v) != 2):
            i = self._new_object(v, OBJ, 0)
        elif isinstance(v, tuple):  # a tuple subclass of two items
            code = (self._one(v[0]) << 32) | self._one(v[1])
            i = int(space.find(space.pairs, np.array([code], dtype=np.int64))[0])
            if i < 0:
                i = self._new_object(v, OBJ_PAIR, code)
                space.add(space.pairs, np.array([i], dtype=np.int64))
        else:
            n = int_equal(v)
            i = -1 if n is None else int(space.find(space.ints, np.array([n], dtype=np.int64))[0])
            if i < 0:
                i = self._new_object(v, OBJ if n is None else OBJ_INT, 0 if n is None else n)
                if n is not None:
                    space.add(space.ints, np.array([i], dtype=np.int64))
        if i not in self._objects:
            self._aliases.append(v)
        self._object_ids[v] = i
        return i

    def _new_object(self, v: object, kind: int, payload: int) -> int:
        i = int(self._space.new(kind, np.array([payload], dtype=np.int64))[0])
        self._objects[i] = v
        return i

    # -- ids -> values ----------------------------------------------------------------------------
    def value_list(self, ids: np.ndarray, known: list | None = None) -> list:
        """The values behind ``ids``, as a list; with ``known``, every list built on the way (the
        values and the components of tuples, at every level) is appended as ``(list, ids)``."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return []
        if len(ids) > 1 and ids[0] == ids[-1] and (ids == ids[0]).all():  # one value (a round, a unit)
            out = self.value_list(ids[:1]) * len(ids)
        else:
            kinds = self._space.kinds.take(ids)
            kind = int(kinds[0])
            if (kinds == kind).all():
                out = self._rows(kind, ids, known)
            else:
                arr = np.empty(len(ids), dtype=object)
                for kind in np.unique(kinds).tolist():
                    sel = np.flatnonzero(kinds == kind)
                    vals = self._rows(kind, ids.take(sel), known)
                    arr[sel] = np.fromiter(vals, dtype=object, count=len(vals))
                out = arr.tolist()
        if known is not None:
            known.append((out, ids))
        return out

    def _rows(self, kind: int, ids: np.ndarray, known: list | None) -> list:
        if kind == INT:
            return self._space.payload.take(ids).tolist()
        if kind == PAIR:
            a, b = unpack(self._space.payload.take(ids))
            return list(zip(self.value_list(a, known), self.value_list(b, known)))
        if kind in (OBJ, OBJ_INT, OBJ_PAIR):
            objects = self._objects
            return [objects[i] for i in ids.tolist()]
        raise ValueError(f"ids {ids[:5].tolist()}... are not in use")

    def values(self, ids: np.ndarray) -> np.ndarray:
        """An object array of the values behind ``ids``."""
        vals = self.value_list(ids)
        return np.fromiter(vals, dtype=object, count=len(vals))

    def value(self, i: int) -> object:
        return self.value_list(np.array([int(i)], dtype=np.int64))[0]

    def int_values(self, ids: np.ndarray) -> np.ndarray | None:
        """The values of ``ids`` as an int64 column when every one is a plain ``int`` of magnitude below
        ``2**62`` (so negations and differences fit), else ``None`` (one gather, no Python object)."""
        if len(ids) == 0:
            return np.empty(0, dtype=np.int64)
        if not (self._space.kinds.take(ids) == INT).all():
            return None
        values = self._space.payload.take(ids)
        if values.min() <= -_SMALL_INT or values.max() >= _SMALL_INT:
            return None
        return values

    def element_hashes(self, ids: np.ndarray) -> np.ndarray:
        """The element hashes (:func:`ddflow.operators.partition.element_hash`) of the values behind
        ``ids``, as int64: ints and pairs from their columns (vectorized), other values one call each."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        if len(ids) == 0:
            return out
        space = self._space
        kinds = space.kinds.take(ids)
        ints = (kinds == INT) | (kinds == OBJ_INT)
        if ints.any():
            out[ints] = int_elements(space.payload.take(ids[ints]))
        pairs = (kinds == PAIR) | (kinds == OBJ_PAIR)
        if pairs.any():
            first, second = unpack(space.payload.take(ids[pairs]))
            out[pairs] = combine(self.element_hashes(first), self.element_hashes(second))
        objects = kinds == OBJ
        if objects.any():
            table = self._objects
            out[objects] = [element_hash(table[i]) for i in ids[objects].tolist()]
        return out

    def owners(self, ids: np.ndarray, count: int) -> np.ndarray:
        """``key_hash(value) % count`` (:mod:`ddflow.operators.partition`) of the values behind
        ``ids``, as int64: ints and pairs of ints in one compiled pass
        (:func:`ddflow.operators.kernels.columns.key_owners`), the others from `element_hashes`."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        space = self._space
        owners, left = columns.key_owners(ids, space.kinds, space.payload, _INT_KINDS, _PAIR_KINDS, count)
        if left:
            rest = np.flatnonzero(owners < 0)
            owners[rest] = finish(self.element_hashes(ids[rest])) % count
        return owners

    def int_columns(self, ids: np.ndarray) -> np.ndarray | None:
        """The values of ``ids`` as int columns when that loses nothing: an int64 column when every
        one is a plain int, an ``(n, 2)`` array when every one is a plain pair of plain ints (ints of
        magnitude below ``2**62``), else ``None``. ``ids_of_columns`` maps them back. One compiled
        pass over the ids (:func:`ddflow.operators.kernels.columns.int_columns`)."""
        if len(ids) == 0:
            return np.empty(0, dtype=np.int64)
        space = self._space
        width, out = columns.int_columns(np.ascontiguousarray(ids, dtype=np.int64), space.kinds, space.payload, INT,
                                         PAIR, _SMALL_INT)
        return out[:, 0] if width == 1 else out if width == 2 else None

    def record_ids(self, columns: Sequence[np.ndarray | list]) -> np.ndarray:
        """Ids of the records given field by field: record ``i`` is the tuple of the ``i``-th values
        of ``columns`` (each an integer array, whose values are Python ints, or a list of hashable
        values, all of one length; at least one column). Each column is interned as a whole: a
        record of two fields is the pair of its two columns' ids (no tuple built); a record of one
        field or of three or more is a tuple, interned as an object (a tuple whose length is not 2
        never equals an int nor a pair), built once per distinct record when records repeat (found
        column by column at C speed). The ids are those `ids` gives the tuples themselves."""
        if not columns:
            raise ShapeError("record_ids: records need at least one field")
        if len(columns) == 2:
            return self.pair(*(self.int_ids(c) if isinstance(c, np.ndarray) else self.ids(c) for c in columns))
        if len(columns[0]) == 0:
            return np.empty(0, dtype=np.int64)
        if len(columns) == 1 and not isinstance(columns[0], np.ndarray):  # the first of equal values kept
            seen = self._checked(columns[0], lambda: distinct(columns[0]))
            if 2 * len(seen) > len(columns[0]):  # mostly distinct: a tuple each, in order
                singles = list(zip(columns[0]))
                return self._checked(singles, lambda: self._object_ids_of(singles))
            index = dict(zip(seen, count_from(0)))
            codes = np.fromiter(map(index.__getitem__, columns[0]), dtype=np.int64, count=len(columns[0]))
            singles = list(zip(index))
            return self._checked(singles, lambda: self._object_ids_of(singles))[codes]
        try:
            codes, firsts = distinct_rows(columns)
        except TypeError as exc:
            raise ShapeError(f"a record is not hashable: {exc}") from exc
        picked = firsts.tolist()
        tuples = list(zip(*(c[firsts].tolist() if isinstance(c, np.ndarray) else [c[i] for i in picked]
                            for c in columns)))
        return self._checked(tuples, lambda: self._object_ids_of(tuples))[codes]

    def ids_of_columns(self, columns: np.ndarray) -> np.ndarray:
        """Ids of the records in int columns: ints (one column) or pairs of ints (two columns)."""
        if columns.ndim == 1:
            return self.int_ids(columns)
        return self.pair(self.int_ids(np.ascontiguousarray(columns[:, 0])), self.int_ids(np.ascontiguousarray(columns[:, 1])))

    # -- keyed records ----------------------------------------------------------------------------
    def split(self, ids: np.ndarray, step: str) -> tuple[np.ndarray, np.ndarray]:
        """``(key ids, val ids)`` of records that must be ``(key, val)`` pairs."""
        if ids.shape[0] == 0:
            return ids, ids
        space = self._space
        is_pair = COMPOSITE.take(space.kinds.take(ids))
        if False in is_pair:  # (is_pair.all(), without the calls of its Python wrapper)
            rec = self.value(ids[int(np.argmin(is_pair))])
            raise ShapeError(f"{step} needs (key, val) records, got {rec!r}")
        codes = space.payload.take(ids)
        return codes >> SHIFT, codes & LOW  # unpack(codes), without its call

    def keys_or_records(self, ids: np.ndarray) -> np.ndarray:
        """The key id of each of ``ids`` that is a ``(key, val)`` pair (what :meth:`split` reads), the
        record's own id for the others."""
        space = self._space
        is_pair = COMPOSITE.take(space.kinds.take(ids))
        return np.where(is_pair, space.payload.take(ids) >> SHIFT, ids)

    def plain_pairs(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(is_pair, firsts, seconds)``: which of ``ids`` name plain 2-tuples (not tuple subclasses),
        and the component ids of those, in order."""
        space = self._space
        is_pair = space.kinds.take(ids) == PAIR
        firsts, seconds = unpack(space.payload.take(ids[is_pair]))
        return is_pair, firsts, seconds

    def plain_ints(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(is_int, values)``: which of ``ids`` name plain ints (of type ``int``, within int64), and
        the value of each (meaningless where it is not one)."""
        space = self._space
        return space.kinds.take(ids) == INT, space.payload.take(ids)

    def reserve(self, n: int, *, ints: int = 0) -> None:
        """Make room for ``n`` new ids at once (see :meth:`IdSpace.reserve`), and buckets in the ints'
        table for ``ints`` more ints (:meth:`IdSpace.reserve_table`: a table grown here is allocated by
        numpy, whose large arrays take huge pages, and not once more inside the insert); ids are
        unchanged."""
        space = self._space
        space.reserve(n)
        if ints:
            space.reserve_table(space.ints, ints)

    def pair(self, keys: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Ids of the records ``(key, val)`` for id columns ``keys`` and ``vals``."""
        if keys.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        codes = keys.astype(np.int64)  # pack(keys, vals), and _pair_ids of them, without their calls:
        codes <<= SHIFT  # the codes are a new contiguous int64 column, which the pairs' table takes as is
        codes |= vals
        space = self._space
        return space._insert(space.pairs, PAIR, codes)

    def pair_into(self, keys: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """:meth:`pair` for an int64 column ``vals`` the caller gives up, which it returns: a slice at
        a time, the pair codes are packed into its buffer and their ids written over them, so a large
        batch needs no column of codes or of ids beside it. The pairs' table is grown once, first,
        for the column (the ids are those :meth:`pair` would hand out: slices in order)."""
        space = self._space
        space.reserve_table(space.pairs, len(vals))
        step = _PACK_SLICE
        for lo in range(0, len(vals), step):
            part = keys[lo : lo + step].astype(np.int64)
            part <<= SHIFT
            codes = vals[lo : lo + step]
            codes |= part
            codes[:] = self._pair_ids(codes)
        return vals

    # -- giving ids back --------------------------------------------------------------------------
    def cache(self, cache):
        """Register a cache keyed by ids (anything with ``clear()``): it is cleared whenever ids are
        given back, since its ids could then name other records. Returns it. Held weakly."""
        self._caches.add(cache)
        return cache

    def marks(self) -> np.ndarray:
        """A fresh mark set (bool per id) holding the pinned ids, for :meth:`mark` and :meth:`reclaim`."""
        marks = self._space.marks()
        self.mark(np.fromiter(self._pinned, dtype=np.int64, count=len(self._pinned)), marks)
        return marks

    def mark(self, ids: np.ndarray, marks: np.ndarray) -> None:
        """Mark a column of ids some state holds, with the ids inside their records."""
        self._space.mark(ids, marks)

    def reclaim(self, marks: np.ndarray) -> int:
        """Give back every id not marked; returns how many. Must run when every id column the dataflow
        holds has been marked and no batch is in flight (the end of ``Dataflow.run``). When every id in
        use is marked (a first run whose records are all held, say), nothing is swept: no id is given
        back, and the caches keyed by ids stay valid."""
        if int(np.count_nonzero(marks)) >= len(self):
            self.sweeps += 1
            self.live_after_sweep = len(self)
            return 0
        for cache in list(self._caches):
            cache.clear()
        dead, dead_objects = self._space.reclaim(marks)
        objects, object_ids = self._objects, self._object_ids
        for i in dead_objects.tolist():
            del object_ids[objects.pop(i)]
        for v in self._aliases:  # their ids may be gone: found again when next seen
            object_ids.pop(v, None)
        self._aliases = []
        self.reclaimed += dead
        self.sweeps += 1
        self.live_after_sweep = len(self)
        return dead


def _shape(plan: tuple) -> tuple | None:
    """What must match for plans to be concatenated; ``None`` for a plan whose interning depends on
    the order of its values among others' (objects that may equal ints or pairs)."""
    tag = plan[0]
    if tag in ("ids", "ints", "objects"):
        return (tag,)
    if tag == "pairs":
        first, second = _shape(plan[2]), _shape(plan[3])
        return None if first is None or second is None else (tag, first, second)
    if tag == "const" and (type(plan[1]) is int or type(plan[1]) in NEVER_INT):
        return (tag, type(plan[1]), plan[1])
    return None


def _length(plan: tuple) -> int:
    tag = plan[0]
    return plan[2] if tag == "const" else plan[1] if tag == "pairs" else len(plan[1])


def _concat(plans: list[tuple]) -> tuple:
    """One plan of plans of one shape."""
    if len(plans) == 1:
        return plans[0]
    tag = plans[0][0]
    if tag in ("ids", "ints"):
        return (tag, np.concatenate([p[1] for p in plans]))
    if tag == "objects":
        return (tag, [v for p in plans for v in p[1]])
    if tag == "const":
        return (tag, plans[0][1], sum(p[2] for p in plans))
    return (tag, sum(p[1] for p in plans), _concat([p[2] for p in plans]), _concat([p[3] for p in plans]))
