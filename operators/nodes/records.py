"""Record builders of joins: ``(key ids, left val ids, right val ids) -> output record ids``.

A join's output record is a function of the matched key and vals. When that function only arranges
its arguments (and constants) into pairs — ``join``'s ``(key, (v1, v2))``, or a ``join_map`` such as
``lambda node, root, dst: (dst, root)`` — the record is a tuple of values already interned, and its id
is built from the id columns by the interner's ``pair`` without running any Python per record.
:func:`shape_of` recognises such functions from their bytecode (only argument loads, constants and
tuple building, then a return: nothing that could inspect a value), so the shortcut never changes a
result. Any other function goes through :class:`PythonBuilder`, memoized: one Python call per new
``(key, left, right)`` triple.

``map`` uses the same shapes with one argument, whose items may also be read (``lambda e: (e[1],
e[0])``, ``lambda root: (root, root)``): an item of a record that is a plain 2-tuple is its component
id, so such a map builds its output ids from id columns too; a record that is not a plain 2-tuple
(another value, a tuple subclass whose ``__getitem__`` could differ) gets the Python call.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable

import numpy as np

from ..values.ids import pack, unpack
from ..values.interner import Interner
from ..values.keytable import KeyTable
from ..values.memo import Memo
from .calls import call_all

Shape = tuple  # ("arg", i) | ("item", i, 0 | 1) | ("const", value) | ("tuple", [Shape, Shape])

_IGNORED = frozenset(("RESUME", "NOP", "CACHE", "EXTENDED_ARG"))
_LOADS = frozenset(("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"))


def shape_of(f: Callable, arity: int = 3, *, items: bool = False) -> Shape | None:
    """How ``f(*args)`` (``arity`` positional args) is built from its arguments, when its body is one
    expression of argument names, constants and 2-tuples of those (with ``items``, also an argument's
    item ``a[0]``, ``a[1]``, ``a[-1]`` or ``a[-2]``, meaningful for a 2-tuple); ``None`` otherwise."""
    if type(f) is not types.FunctionType:
        return None
    code = f.__code__
    if code.co_argcount != arity or code.co_kwonlyargcount or code.co_flags & (
            inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    if set(code.co_cellvars) & set(code.co_varnames[:arity]):
        return None
    stack: list[Shape] = []
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _IGNORED:
            continue
        if op in _LOADS:
            if ins.arg is None or ins.arg >= arity:
                return None
            stack.append(("arg", ins.arg))
        elif op == "LOAD_FAST_LOAD_FAST":
            first, second = ins.arg >> 4, ins.arg & 15
            if first >= arity or second >= arity:
                return None
            stack += [("arg", first), ("arg", second)]
        elif op == "LOAD_CONST":
            stack.append(("const", ins.argval))
        elif op == "BINARY_SUBSCR" and items:
            if len(stack) < 2 or stack[-2][0] != "arg" or stack[-1][0] != "const" \
                    or type(stack[-1][1]) is not int or stack[-1][1] not in (0, 1, -1, -2):
                return None
            item = ("item", stack[-2][1], stack[-1][1] % 2)
            del stack[-2:]
            stack.append(item)
        elif op == "BUILD_TUPLE":
            if ins.arg != 2 or len(stack) < 2:
                return None
            pair = ("tuple", [stack[-2], stack[-1]])
            del stack[-2:]
            stack.append(pair)
        elif op == "RETURN_VALUE":
            return stack[0] if len(stack) == 1 else None
        elif op == "RETURN_CONST":
            return ("const", ins.argval) if not stack else None
        else:
            return None
    return None


class PairBuilder:
    """Ids of records built by a :func:`shape_of` shape, from id columns (no Python per record)."""

    python = False  # never calls user code: rows need no consolidation before building

    def __init__(self, interner: Interner, shape: Shape) -> None:
        self.interner, self.shape = interner, shape
        # a pair of two arguments (``(dst, root)``, ``(key, (v1, v2))``'s inner pair): their positions,
        # built by one ``pair`` without walking the shape
        parts = shape[1] if shape[0] == "tuple" else ()
        self._args = (parts[0][1], parts[1][1]) if parts and parts[0][0] == parts[1][0] == "arg" else None

    def __call__(self, keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        columns = self.pairs(keys, a, b)
        if columns is not None:
            return self.interner.pair(*columns)
        return build(self.interner, self.shape, (keys, a, b))

    def pairs(self, keys: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The records as two id columns when the shape builds a pair (no pair id for the record
        itself), else ``None``."""
        shape = self.shape
        if shape[0] != "tuple":
            return None
        args = self._args
        if args is not None:
            columns = (keys, a, b)
            return columns[args[0]], columns[args[1]]
        return tuple(build(self.interner, part, (keys, a, b)) for part in shape[1])


def build(interner: Interner, shape: Shape, args: tuple[np.ndarray, ...],
          items: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Ids of the records ``shape`` builds from the id columns ``args`` (and, for an ``item``
    shape, the component columns ``items`` of a single pair argument)."""
    kind = shape[0]
    if kind == "arg":
        return args[shape[1]]
    if kind == "item":
        return items[shape[2]]
    if kind == "const":  # its id asked each time: never held across steps
        return np.full(len(args[0]), interner.id(shape[1]), dtype=np.int64)
    return interner.pair(build(interner, shape[1][0], args, items), build(interner, shape[1][1], args, items))


class PythonBuilder:
    """Ids of ``f(key, left, right)`` (``f`` deterministic), one Python call per new triple.

    The same triples recur at many times, so the builder remembers them: ``(key, left)`` pairs are
    numbered densely by a key table, so that ``(number, right)`` fits one int64 code of a memo whose
    results are the output ids. Both are caches bounded by the interner's memo limit (they start
    afresh together), registered with the interner so that they are forgotten whenever it gives ids
    back (a code could then name other records)."""

    python = True  # runs user code: rows are consolidated first, so each record is built once

    def __init__(self, interner: Interner, f: Callable) -> None:
        self.interner = interner
        self.f = f
        self._lefts = KeyTable()  # (key, left) codes, numbered
        self._triples = Memo(self._compute, limit=interner.memo_limit)
        interner.cache(self)

    def _compute(self, codes: np.ndarray) -> np.ndarray:
        number, right = unpack(codes)
        key, left = unpack(self._lefts.keys[number])
        interner = self.interner
        known: list = []
        cols = [interner.value_list(key, known), interner.value_list(left, known), interner.value_list(right, known)]
        return interner.ids(call_all("join_map", self.f, cols), known)

    def clear(self) -> None:
        """Forget every remembered record (the key table and the memo together: the memo's codes hold
        the table's numbers)."""
        self._lefts = KeyTable()
        self._triples.clear()

    def __len__(self) -> int:
        return len(self._triples)

    def __call__(self, keys: np.ndarray, lefts: np.ndarray, rights: np.ndarray) -> np.ndarray:
        if len(self._lefts) >= self._triples.limit or self._triples.full():
            self.clear()
        return self._triples(pack(self._lefts.index(pack(keys, lefts)), rights))


def uses_items(shape: Shape) -> bool:
    """True when ``shape`` reads an item of an argument (so it holds only for 2-tuple arguments)."""
    if shape[0] == "item":
        return True
    return shape[0] == "tuple" and (uses_items(shape[1][0]) or uses_items(shape[1][1]))


def items_read(shape: Shape) -> frozenset[int]:
    """The items (0, 1) of its argument that ``shape`` reads."""
    if shape[0] == "item":
        return frozenset((shape[2],))
    if shape[0] == "tuple":
        return items_read(shape[1][0]) | items_read(shape[1][1])
    return frozenset()


def uses_record(shape: Shape) -> bool:
    """True when ``shape`` reads its argument whole (not only its items)."""
    if shape[0] == "arg":
        return True
    return shape[0] == "tuple" and (uses_record(shape[1][0]) or uses_record(shape[1][1]))


class MapBuilder:
    """Ids of ``f(record)`` for a :func:`shape_of` shape of one argument (``items`` allowed), from id
    columns: every record when the shape reads no item, else the records that are plain 2-tuples;
    ``None`` for a function of another shape. ``from_pairs`` is true when the shape reads only items
    and constants: then it builds from the two columns of pair records (:meth:`pairs`), whose
    records are plain 2-tuples, with no pair id; ``items_read`` says which of their items it reads."""

    def __init__(self, interner: Interner, f: Callable) -> None:
        self.interner = interner
        self.shape = shape_of(f, 1, items=True)
        self.items = self.shape is not None and uses_items(self.shape)
        self.from_pairs = self.shape is not None and not uses_record(self.shape)
        self.items_read = items_read(self.shape) if self.from_pairs else frozenset((0, 1))

    def pairs(self, firsts: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, ...]:
        """The outputs of the records ``(firsts[i], seconds[i])`` (``from_pairs`` true): their two
        columns when the shape builds a pair, else their ids (one column). The column of an item the
        shape does not read (not in ``items_read``) may hold any ids of the same length."""
        shape, interner, items = self.shape, self.interner, (firsts, seconds)
        if shape[0] == "tuple":
            return tuple(build(interner, part, (firsts,), items) for part in shape[1])
        return (build(interner, shape, (firsts,), items),)  # (``firsts`` gives a constant its length)

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``(out, built)``: ``out[i]`` is the id of ``f(record i)`` where ``built[i]`` (``built`` None:
        everywhere); elsewhere ``out`` is undefined and the caller calls ``f``."""
        if not self.items:
            return build(self.interner, self.shape, (ids,)), None
        built, firsts, seconds = self.interner.plain_pairs(ids)
        out = np.empty(len(ids), dtype=np.int64)
        out[built] = build(self.interner, self.shape, (ids[built],), (firsts, seconds))
        return out, built


def record_builder(interner: Interner, f: Callable) -> PairBuilder | PythonBuilder:
    """The builder of ``f(key, left, right)`` records: from id columns when ``f`` only makes pairs of
    its arguments and constants, else memoized Python calls."""
    shape = shape_of(f)
    return PairBuilder(interner, shape) if shape is not None else PythonBuilder(interner, f)

