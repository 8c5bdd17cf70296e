"""Record ids: every distinct Python value a dataflow sees is interned to a dense int64 id.

Batches and arrangements then hold only integer columns, so consolidation, sorting and lookups are
pure numpy (the 2018 post's interning and row ids). Equality is Python equality: equal values get one
id, whose value is the first of them seen.

Values are stored by kind, in columns rather than as Python objects, so that interning a batch costs
a few numpy passes rather than a dict operation per value and interned records cost bytes, not
objects: ints (those that fit in an int64) live in an int table, plain 2-tuples as the pair of their
components' ids in a pair table (a ``(key, val)`` record is therefore split into its key and val ids
by a lookup, and ``pair`` builds records from id columns without touching Python), and every other
value in a dict. Ids are handed out in runs of one kind, so an id's kind and row follow from the run
holding it. A tuple is rebuilt from its components when its value is asked for. Values that equal an
int or a plain 2-tuple without being one (``True``, ``1.0``, a named tuple) are kept as objects, and
the int or pair they equal is registered as an alias of their id: whichever comes first holds the id.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import is_, itemgetter

import numpy as np

from ..config import DEFAULT
from ..errors import ShapeError
from .memo import MAX_ID, SHIFT, KeyTable, Memo, pack

INT, PAIR, OBJ = 0, 1, 2
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_HASH_MOD = (1 << 61) - 1  # CPython's hash of an int is the int modulo this prime (sign kept)
_NEVER_INT = frozenset((str, bytes, type(None), frozenset, range, type))  # types never equal to an int
_DEEP = 64  # nesting below which tuples are interned level by level in bulk
_PENDING = 1 << 24  # values decomposed into columns before they are interned together

_first, _second = itemgetter(0), itemgetter(1)


@contextmanager
def bulk() -> Iterator[None]:
    """Python work over a batch: the cyclic garbage collector pauses meanwhile. Building millions of
    tuples and lists (values, groups, results) otherwise triggers collections that traverse them all
    again and again; what they would collect waits until the batch is done."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Unhashable(TypeError):
    """A value (or a component of a tuple) cannot be hashed."""


class _Runs:
    """Ids in runs of one kind: run ``r`` holds ids ``start[r]..`` for rows ``row[r]..`` of its kind's table."""

    def __init__(self) -> None:
        self.start = np.zeros(16, dtype=np.int64)
        self.kind = np.zeros(16, dtype=np.int8)
        self.row = np.zeros(16, dtype=np.int64)
        self.count = 0
        self.total = 0  # ids handed out
        self._by_kind: dict[int, list[np.ndarray]] = {}
        self._kind_runs: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}

    def alloc(self, kind: int, row: int, n: int) -> int:
        """``n`` new ids for rows ``row..row + n - 1`` of ``kind``; returns the first."""
        first = self.total
        if n == 0:
            return first
        self.total += n
        if self.count and self.kind[self.count - 1] == kind:
            return first  # the kind's rows and the ids both continue the last run
        if self.count == len(self.start):
            for name in ("start", "kind", "row"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.zeros_like(a)]))
        self.start[self.count], self.kind[self.count], self.row[self.count] = first, kind, row
        self.count += 1
        self._kind_runs.pop(kind, None)
        return first

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray | int, np.ndarray]:
        """``(kinds, rows)`` of ``ids``; ``kinds`` is one int when every id has the same kind."""
        if self.count == 1:
            return int(self.kind[0]), ids
        starts = self.start[: self.count]
        first = int(np.searchsorted(starts, ids.min(), "right")) - 1
        if first == int(np.searchsorted(starts, ids.max(), "right")) - 1:  # all in one run
            return int(self.kind[first]), ids + (self.row[first] - self.start[first])
        r = np.searchsorted(starts, ids, "right") - 1
        kinds = self.kind[r]
        rows = ids - self.start[r] + self.row[r]
        lo, hi = int(kinds.min()), int(kinds.max())
        return (lo if lo == hi else kinds), rows

    def ids(self, kind: int, rows: np.ndarray) -> np.ndarray:
        """The ids of rows of ``kind``'s table."""
        got = self._kind_runs.get(kind)
        if got is None or got[2] != self.count:
            mine = np.flatnonzero(self.kind[: self.count] == kind)
            got = self._kind_runs[kind] = (self.row[mine], self.start[mine], self.count)
        row0, start, _ = got
        if len(row0) == 1:
            return rows + (start[0] - row0[0])
        r = np.searchsorted(row0, rows, "right") - 1
        return rows - row0[r] + start[r]


class Interner:
    """Dense ids for hashable values; ``values(ids)`` maps back. ``memo_limit`` bounds the memos of the
    record builders it makes."""

    def __init__(self, *, memo_limit: int = DEFAULT.memo_limit) -> None:
        self.memo_limit = memo_limit
        self._runs = _Runs()
        self._ints = KeyTable()  # exact ints
        self._pairs = KeyTable()  # codes (first id << 32 | second id) of plain 2-tuples
        self._objects: list[object] = []
        self._object_ids: dict[object, int] = {}  # also caches objects that equal an int or a pair
        self._int_alias = KeyTable()  # ints equal to an object interned before them...
        self._int_alias_ids = np.empty(0, dtype=np.int64)  # ...and that object's id
        self._pair_alias = KeyTable()
        self._pair_alias_ids = np.empty(0, dtype=np.int64)
        self._object_pairs: dict[int, int] = {}  # id of a tuple-subclass pair -> its components' code

    def __len__(self) -> int:
        return self._runs.total

    def nbytes(self) -> int:
        """Bytes of the id tables (not counting the Python objects of the dict)."""
        return self._ints.nbytes() + self._pairs.nbytes() + 8 * len(self._objects)

    # -- values -> ids ----------------------------------------------------------------------------
    def id(self, value: object) -> int:
        return int(self.ids([value])[0])

    def ids(self, values: Iterable[object], known: list | None = None) -> np.ndarray:
        """Ids of many values (interning new ones).

        ``known``: ``(values, ids)`` lists materialized by :meth:`value_list`; a list (at any level
        of the tuples) made of exactly those objects takes their ids without a lookup."""
        values = values if isinstance(values, list) else list(values)
        with bulk():
            return self._checked(values, lambda: self._intern(self._plan(values, known or (), 0)))

    def ids_of_chunks(self, chunks: Iterable[tuple[list, list]]) -> np.ndarray:
        """Ids of values given chunk by chunk, as ``(values, known)``: each chunk is decomposed into
        columns as it comes (its Python objects can go), and consecutive chunks of one shape are
        interned together, so the tables grow by large batches (the cheapest way: one sort)."""
        parts: list[np.ndarray] = []
        pending: list[tuple] = []
        shape: tuple | None = None
        size = 0
        with bulk():
            for values, known in chunks:
                plan = self._checked(values, lambda: self._plan(values, known, 0))
                mine = _shape(plan)
                if pending and (mine != shape or size >= _PENDING):
                    parts.append(self._intern_pending(pending))
                    size = 0
                if mine is None:  # order matters: interned now, with its values at hand for errors
                    parts.append(self._checked(values, lambda: self._intern(plan)))
                else:
                    pending.append(plan)
                    shape, size = mine, size + _length(plan)
            plan = values = known = ()  # drop the last chunk's objects before the tables grow
            if pending:
                parts.append(self._intern_pending(pending))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def _intern_pending(self, pending: list) -> np.ndarray:
        merged = _concat(pending)
        pending.clear()  # the chunks' own columns go before the tables grow
        return self._intern(merged)

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
        if values.dtype.kind == "u" and len(values) and int(values.max()) > _I64_MAX:
            return self.ids(values.tolist())
        return self._int_ids(values.astype(np.int64, copy=False))

    # A plan is a batch of values decomposed into columns, to be interned later:
    #   ("ids", ids)  values known to have these ids     ("ints", int64 array)  exact ints
    #   ("const", value, n)  n values equal to one        ("objects", list)  values of _NEVER_INT types
    #   ("pairs", n, plan of the firsts, plan of the seconds)  plain 2-tuples
    #   ("values", list, known, depth)  anything else, interned kind by kind (in order when that matters)
    def _plan(self, values: list, known: Sequence, depth: int) -> tuple:
        n = len(values)
        if n == 0:
            return ("ids", np.empty(0, dtype=np.int64))
        for objs, ids in known:
            if len(objs) == n and values[0] is objs[0] and all(map(is_, values, objs)):
                return ("ids", ids)
        if n > 1 and _all_equal(values):
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
            elif kind in _NEVER_INT:
                return ("objects", values)
        return ("values", values, known, depth)

    def _intern(self, plan: tuple) -> np.ndarray:
        tag = plan[0]
        if tag == "ids":
            return plan[1]
        if tag == "ints":
            return self._int_ids(plan[1])
        if tag == "pairs":
            return self._pair_ids(pack(self._intern(plan[2]), self._intern(plan[3])))
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
            if kind is int and _I64_MIN <= v <= _I64_MAX:
                ints.append(i)
            elif kind is tuple and len(v) == 2:
                pairs.append(i)
            else:
                objects.append(i)
        out = np.empty(len(values), dtype=np.int64)
        if objects and (ints or pairs) and not all(_plain(values[i]) for i in objects):
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
        return self._kind_ids(INT, self._ints, arr, self._int_alias, self._int_alias_ids)

    def _pair_values(self, values: list, known: Sequence, depth: int) -> np.ndarray:
        a = self._intern(self._plan(list(map(_first, values)), known, depth + 1))
        b = self._intern(self._plan(list(map(_second, values)), known, depth + 1))
        return self._pair_ids(pack(a, b))

    def _deep_pairs(self, values: list) -> np.ndarray:
        """Pairs nested too deep for bulk levels: one at a time (the same ids as in bulk)."""
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            a = self._one(v[0])
            b = self._one(v[1])
            out[i] = self._pair_ids(np.array([(a << SHIFT) | b], dtype=np.int64))[0]
        return out

    def _one(self, v: object) -> int:
        if type(v) is tuple and len(v) == 2:
            a, b = self._one(v[0]), self._one(v[1])
            return int(self._pair_ids(np.array([(a << SHIFT) | b], dtype=np.int64))[0])
        return int(self._mixed([v], (), _DEEP)[0])

    def _pair_ids(self, codes: np.ndarray) -> np.ndarray:
        return self._kind_ids(PAIR, self._pairs, codes, self._pair_alias, self._pair_alias_ids)

    def _kind_ids(self, kind: int, table: KeyTable, keys: np.ndarray, alias: KeyTable, alias_ids) -> np.ndarray:
        """Ids of the keys of one kind's table, adding the new ones (unless an object holds them)."""
        rows = table.find(keys)
        missing = np.flatnonzero(rows < 0)
        if len(missing) == 0:
            return self._runs.ids(kind, rows)
        if len(missing) == len(keys) and len(alias) == 0:  # all new (a large batch often is)
            del rows, missing
            before = len(table)
            rows = table.add_missing(keys)
            self._runs.alloc(kind, before, len(table) - before)
            return self._runs.ids(kind, rows)
        out = np.empty(len(keys), dtype=np.int64)
        found = rows >= 0
        out[found] = self._runs.ids(kind, rows[found])
        missing = self._aliased(keys, missing, out, alias, alias_ids)
        if len(missing):
            before = len(table)
            new_rows = table.add_missing(keys[missing])
            self._runs.alloc(kind, before, len(table) - before)
            out[missing] = self._runs.ids(kind, new_rows)
        return out

    @staticmethod
    def _aliased(keys, missing, out, table: KeyTable, alias_ids: np.ndarray) -> np.ndarray:
        """Fill ``out`` for the missing keys that alias an object; return those still missing."""
        if len(table) == 0:
            return missing
        rows = table.find(keys[missing])
        hit = rows >= 0
        out[missing[hit]] = alias_ids[rows[hit]]
        return missing[~hit]

    def _object_ids_of(self, values: list) -> np.ndarray:
        """Ids of values kept as objects (and of objects equal to an int or a pair)."""
        get = self._object_ids.get
        try:
            out = [get(v) for v in values]
        except TypeError as exc:
            raise Unhashable(str(exc)) from exc
        if None not in out:
            return np.array(out, dtype=np.int64)
        new = [i for i, got in enumerate(out) if got is None]
        if not all(_plain(values[i]) for i in new):
            for i in new:  # in order: the first of equal values holds the id
                out[i] = self._special(values[i])
            return np.array(out, dtype=np.int64)
        fresh: dict[object, int] = {}  # new objects, numbered in order of first appearance
        for i in new:
            out[i] = -1 - fresh.setdefault(values[i], len(fresh))
        first = self._runs.alloc(OBJ, len(self._objects), len(fresh))
        self._objects.extend(fresh)
        self._object_ids.update(zip(fresh, range(first, first + len(fresh))))
        return np.array([first - 1 - i if i < 0 else i for i in out], dtype=np.int64)

    def _special(self, v: object) -> int:
        """The id of an object that may equal an int or a plain 2-tuple."""
        i = self._object_ids.get(v)
        if i is not None:
            return i
        if _plain(v) or (isinstance(v, tuple) and len(v) != 2):
            i = self._new_object(v)
        elif isinstance(v, tuple):  # a tuple subclass of two items
            code = (self._one(v[0]) << SHIFT) | self._one(v[1])
            row = self._pairs.find(np.array([code], dtype=np.int64))[0]
            if row >= 0:
                i = int(self._runs.ids(PAIR, np.array([row]))[0])
            else:
                i = self._new_object(v)
                self._pair_alias_ids = _register(self._pair_alias, self._pair_alias_ids, code, i)
                self._object_pairs[i] = code
        else:
            n = _int_equal(v)
            row = -1 if n is None else self._ints.find(np.array([n], dtype=np.int64))[0]
            if row >= 0:
                i = int(self._runs.ids(INT, np.array([row]))[0])
            else:
                i = self._new_object(v)
                if n is not None:
                    self._int_alias_ids = _register(self._int_alias, self._int_alias_ids, n, i)
        self._object_ids[v] = i
        return i

    def _new_object(self, v: object) -> int:
        i = self._runs.alloc(OBJ, len(self._objects), 1)
        self._objects.append(v)
        return i

    # -- ids -> values ----------------------------------------------------------------------------
    def value_list(self, ids: np.ndarray, known: list | None = None) -> list:
        """The values behind ``ids``, as a list; with ``known``, every list built on the way (the
        values and the components of tuples, at every level) is appended as ``(list, ids)``."""
        ids = np.asarray(ids, dtype=np.int64)
        with bulk():
            return self._value_list(ids, known)

    def _value_list(self, ids: np.ndarray, known: list | None) -> list:
        if len(ids) == 0:
            return []
        if len(ids) > 1 and ids[0] == ids[-1] and (ids == ids[0]).all():  # one value (a round, a unit)
            out = self._value_list(ids[:1], None) * len(ids)
            if known is not None:
                known.append((out, ids))
            return out
        kinds, rows = self._runs.locate(ids)
        if isinstance(kinds, int):
            out = self._rows(kinds, rows, known)
        else:
            arr = np.empty(len(ids), dtype=object)
            for kind in (INT, PAIR, OBJ):
                sel = np.flatnonzero(kinds == kind)
                if len(sel) == 0:
                    continue
                vals = self._rows(kind, rows[sel], known)
                arr[sel] = np.fromiter(vals, dtype=object, count=len(vals))
            out = arr.tolist()
        if known is not None:
            known.append((out, ids))
        return out

    def _rows(self, kind: int, rows: np.ndarray, known: list | None) -> list:
        if kind == INT:
            return self._ints.keys[rows].tolist()
        if kind == PAIR:
            codes = self._pairs.keys[rows]
            return list(zip(self._value_list(codes >> SHIFT, known), self._value_list(codes & MAX_ID, known)))
        objects = self._objects
        return [objects[i] for i in rows.tolist()]

    def values(self, ids: np.ndarray) -> np.ndarray:
        """An object array of the values behind ``ids``."""
        vals = self.value_list(ids)
        return np.fromiter(vals, dtype=object, count=len(vals))

    def value(self, i: int) -> object:
        return self.value_list(np.array([int(i)], dtype=np.int64))[0]

    # -- keyed records ----------------------------------------------------------------------------
    def split(self, ids: np.ndarray, step: str) -> tuple[np.ndarray, np.ndarray]:
        """``(key ids, val ids)`` of records that must be ``(key, val)`` pairs."""
        if len(ids) == 0:
            return ids, ids
        kinds, rows = self._runs.locate(ids)
        if isinstance(kinds, int) and kinds == PAIR:
            codes = self._pairs.keys[rows]
        else:
            codes = np.empty(len(ids), dtype=np.int64)
            is_pair = np.full(len(ids), kinds == PAIR) if isinstance(kinds, int) else kinds == PAIR
            codes[is_pair] = self._pairs.keys[rows[is_pair]]
            for i in np.flatnonzero(~is_pair).tolist():
                code = self._object_pairs.get(int(ids[i]))
                if code is None:
                    rec = self.value(ids[i])
                    raise ShapeError(f"{step} needs (key, val) records, got {rec!r}")
                codes[i] = code
        return codes >> SHIFT, codes & MAX_ID

    def pair(self, keys: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Ids of the records ``(key, val)`` for id columns ``keys`` and ``vals``."""
        if len(keys) == 0:
            return np.empty(0, dtype=np.int64)
        return self._pair_ids(pack(keys, vals))

    def make(self, builder, *columns: np.ndarray) -> np.ndarray:
        """Ids of ``builder(*values)`` over value columns given as id arrays (no memo)."""
        known: list = []
        cols = [self.value_list(c, known) for c in columns]
        return self.ids(list(map(builder, *cols)), known)

    def builder(self, f) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """A memoized ``(keys, left vals, right vals) -> ids of f(key, left, right)`` (f deterministic).

        ``(key, left)`` pairs are numbered densely by a key table, so that ``(number, right)`` fits one
        int64 memo code. The memo's codes hold those numbers: when the table or the memo reaches the memo
        limit, both start afresh together."""
        lefts = KeyTable()  # (key, left) codes, numbered

        def compute(codes: np.ndarray) -> np.ndarray:
            kl = lefts.keys[codes >> SHIFT]
            known: list = []
            cols = [self.value_list(kl >> SHIFT, known), self.value_list(kl & MAX_ID, known),
                    self.value_list(codes & MAX_ID, known)]
            return self.ids(list(map(f, *cols)), known)

        triples = Memo(compute, limit=self.memo_limit)

        def build(keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            nonlocal lefts
            if len(lefts) >= triples.limit or triples.full():
                lefts = KeyTable()
                triples.clear()
            return triples(pack(lefts.index(pack(keys, a)), b))

        return build


def _shape(plan: tuple) -> tuple | None:
    """What must match for plans to be concatenated; ``None`` for a plan whose interning depends on
    the order of its values among others' (objects that may equal ints or pairs)."""
    tag = plan[0]
    if tag in ("ids", "ints", "objects"):
        return (tag,)
    if tag == "pairs":
        first, second = _shape(plan[2]), _shape(plan[3])
        return None if first is None or second is None else (tag, first, second)
    if tag == "const" and (type(plan[1]) is int or type(plan[1]) in _NEVER_INT):
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


def _all_equal(values: list) -> bool:
    """Whether every value equals the first (then they all have its id)."""
    try:
        return bool(values[-1] == values[0]) and values.count(values[0]) == len(values)
    except Exception:  # values whose equality is not a bool (arrays): not a shortcut to take
        return False


def _plain(v: object) -> bool:
    """Whether ``v`` can equal neither an int nor a 2-tuple (so it needs no alias check)."""
    kind = type(v)
    if kind in _NEVER_INT:
        return True
    if kind is float:
        return not v.is_integer()
    if kind is tuple:
        return len(v) != 2
    return False


def _int_equal(v: object) -> int | None:
    """The int in int64 range that ``v`` equals, if any (found through ``hash``: equal values hash
    alike, and an int's hash is the int modulo ``2**61 - 1``)."""
    if isinstance(v, tuple):
        return None
    if type(v) is float:
        return int(v) if v.is_integer() and _I64_MIN <= v < 2.0**63 else None
    h = hash(v)
    cands = []
    if h >= 0:
        cands += [h + k * _HASH_MOD for k in range(5)]
        if h == 0:
            cands += [-k * _HASH_MOD for k in range(1, 5)]
    else:
        base = [1, 2] if h == -2 else [-h]
        cands += [-(b + k * _HASH_MOD) for b in base for k in range(5)]
    for c in cands:
        if _I64_MIN <= c <= _I64_MAX:
            try:
                if v == c:
                    return c
            except Exception:  # an object whose equality with ints fails: it equals none
                return None
    return None


def _register(table: KeyTable, ids: np.ndarray, key: int, i: int) -> np.ndarray:
    row = int(table.index(np.array([key], dtype=np.int64))[0])
    if row >= len(ids):
        ids = np.concatenate([ids, np.zeros(max(16, len(ids)), dtype=np.int64)])
    ids[row] = i
    return ids


def sort_values(values: Sequence[object]) -> list[int]:
    """Indices ordering ``values`` by Python ordering, falling back to ``repr`` for mixed types."""
    try:
        return sorted(range(len(values)), key=values.__getitem__)
    except TypeError:
        return sorted(range(len(values)), key=lambda i: (type(values[i]).__name__, repr(values[i])))
