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
(another value, a tuple subclass whose ``__getitem__`` could differ) gets the Python call. A map's
shape may also apply ``+``, ``-``, ``*``, ``//`` or ``%`` to such values and int constants
(``lambda v: (v[0], v[1] + 1)``, ``lambda n: n % 100``, ``lambda r: r[0] * r[1]``): computed on
int64 columns where the values are plain ints and Python's result is an int64 (no overflow, no
division by zero); any other record (a float, a bool, an int beyond int64, a result beyond it) gets
the Python call, so the results are Python's. A ``filter``'s predicate may compare two such operands
(``lambda r: r[1] > 5``, ``lambda r: r[0] < r[1]``, :class:`PredicateBuilder`), decided the same way.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable

import numpy as np

from ..values.equality import I64_MAX, I64_MIN
from ..values.ids import pack, unpack
from ..values.interner import Interner
from ..values.keytable import KeyTable
from ..values.memo import Memo
from .calls import call_all

Shape = tuple  # ("arg", i) | ("item", i, 0 | 1) | ("const", value) | ("tuple", [Shape, Shape])
#                | ("arith", op, Shape, Shape): values or int constants (maps only)
#                | ("compare", op, Shape, Shape): the same compared (a filter's whole body)

_ARITH = frozenset(("+", "-", "*", "//", "%"))  # BINARY_OP's operators computed from int columns
_COMPARE = {"<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal, ">": np.greater,
            ">=": np.greater_equal}  # COMPARE_OP's operators of a filter's predicate

_IGNORED = frozenset(("RESUME", "NOP", "CACHE", "EXTENDED_ARG"))
_LOADS = frozenset(("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"))


def shape_of(f: Callable, arity: int = 3, *, items: bool = False, compare: bool = False) -> Shape | None:
    """How ``f(*args)`` (``arity`` positional args) is built from its arguments, when its body is one
    expression of argument names, constants and 2-tuples of those (with ``items``, also an argument's
    item ``a[0]``, ``a[1]``, ``a[-1]`` or ``a[-2]``, meaningful for a 2-tuple, and ``x op y`` for an
    operator of ``_ARITH`` and operands that are such values (not tuples) or int constants, at least
    one a value; with ``compare``, the whole body may also compare two such operands: ``("compare",
    op, left, right)``); ``None`` otherwise."""
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
        elif op == "BINARY_OP" and items:
            if len(stack) < 2 or ins.argrepr not in _ARITH:
                return None
            left, right = stack[-2], stack[-1]
            if not _operands(left, right):
                return None
            del stack[-2:]
            stack.append(("arith", ins.argrepr, left, right))
        elif op == "COMPARE_OP" and compare:
            if len(stack) != 2 or ins.argrepr not in _COMPARE:
                return None
            left, right = stack
            if not _operands(left, right):
                return None
            stack = [("compare", ins.argrepr, left, right)]
            compare = False  # the body's last operation
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


def _int_constant(shape: Shape) -> bool:
    """An int constant within int64 (numpy computes with it as one)."""
    return shape[0] == "const" and type(shape[1]) is int and I64_MIN <= shape[1] <= I64_MAX


def _value(shape: Shape) -> bool:
    """A shape whose value may be an int: an argument, an item, or arithmetic on one."""
    return shape[0] in ("arg", "item", "arith")


def _operands(left: Shape, right: Shape) -> bool:
    """Operands of arithmetic or a comparison computed on int columns: values or int constants, at
    least one a value."""
    return (_value(left) or _int_constant(left)) and (_value(right) or _int_constant(right)) and (
        _value(left) or _value(right))


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
          items: tuple[np.ndarray, np.ndarray] | None = None, ok: np.ndarray | None = None) -> np.ndarray:
    """Ids of the records ``shape`` builds from the id columns ``args`` (and, for an ``item``
    shape, the component columns ``items`` of a single pair argument). With ``arith`` shapes,
    ``ok`` (bool, one per record) is cleared where a record's arithmetic needs Python: its id there
    is meaningless (but an id in use)."""
    kind = shape[0]
    if kind == "arg":
        return args[shape[1]]
    if kind == "item":
        return items[shape[2]]
    if kind == "const":  # its id asked each time: never held across steps
        return np.full(len(args[0]), interner.id(shape[1]), dtype=np.int64)
    if kind == "arith":
        return _arith(interner, shape, args, items, ok)
    return interner.pair(build(interner, shape[1][0], args, items, ok), build(interner, shape[1][1], args, items, ok))


def _arith(interner: Interner, shape: Shape, args: tuple[np.ndarray, ...],
           items: tuple[np.ndarray, np.ndarray] | None, ok: np.ndarray) -> np.ndarray:
    """Ids of ``left op right`` for the ``arith`` shape ``("arith", op, left, right)``, where its values
    are plain ints and Python's result an int64; elsewhere ``ok`` is cleared (and a value's id stands
    in)."""
    _, op, left, right = shape
    plain, (x, y), ids = _int_operands(interner, (left, right), lambda part: build(interner, part, args, items, ok))
    with np.errstate(all="ignore"):  # int64 wraps silently: each result's wrap is detected here
        if op == "+":
            r = x + y
            fine = ((x ^ r) & (y ^ r)) >= 0  # the sum kept an operand's sign: no wrap
        elif op == "-":
            r = x - y
            fine = ((x ^ y) & (x ^ r)) >= 0
        elif op == "*":
            r = x * y
            fine = (x == 0) | ((r // np.where(x == 0, 1, x) == y) & ~((x == -1) & (y == I64_MIN)))
        else:  # "//" and "%": no zero divisor, no -1 (MIN // -1 leaves int64; Python's % is 0 there)
            fine = (y != 0) & (y != -1)
            den = np.where(fine, y, 1)
            r = x // den if op == "//" else x % den  # floor division and its remainder, as Python's
    good = plain & fine
    ok &= good
    if good.all():
        return interner.int_ids(r)
    out = ids.copy()
    out[good] = interner.int_ids(r[good])
    return out


def _int_operands(interner: Interner, parts: tuple[Shape, Shape], ids_of: Callable[[Shape], tuple]
                  ) -> tuple[np.ndarray, tuple, np.ndarray]:
    """``(plain, (x, y), ids)`` for two operands: an int constant as an int64 scalar, a value as the
    int64 column of its records' values (``ids_of(part)`` gives their ids); ``plain`` where every
    value is a plain int; ``ids`` the first value's ids."""
    plain, values, first = None, [], None
    for part in parts:
        if part[0] == "const":
            values.append(np.int64(part[1]))
            continue
        ids = ids_of(part)
        is_int, x = interner.plain_ints(ids)
        plain = is_int if plain is None else plain & is_int
        first = ids if first is None else first
        values.append(x)
    return plain, tuple(values), first


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


def _parts(shape: Shape) -> tuple[Shape, ...]:
    """The shapes ``shape`` is built of."""
    if shape[0] == "tuple":
        return tuple(shape[1])
    return shape[2:] if shape[0] in ("arith", "compare") else ()


def uses_items(shape: Shape) -> bool:
    """True when ``shape`` reads an item of an argument (so it holds only for 2-tuple arguments)."""
    return shape[0] == "item" or any(uses_items(part) for part in _parts(shape))


def uses_arith(shape: Shape) -> bool:
    """True when ``shape`` computes arithmetic (so some records may need the Python call)."""
    return shape[0] == "arith" or any(uses_arith(part) for part in _parts(shape))


def items_read(shape: Shape) -> frozenset[int]:
    """The items (0, 1) of its argument that ``shape`` reads."""
    if shape[0] == "item":
        return frozenset((shape[2],))
    return frozenset().union(*(items_read(part) for part in _parts(shape)))


def uses_record(shape: Shape) -> bool:
    """True when ``shape`` reads its argument whole (not only its items)."""
    return shape[0] == "arg" or any(uses_record(part) for part in _parts(shape))


class MapBuilder:
    """Ids of ``f(record)`` for ``shape``, ``f``'s :func:`shape_of` of one argument (``items`` allowed), from id
    columns: every record when the shape reads no item, else the records that are plain 2-tuples;
    ``None`` for a function of another shape. ``from_pairs`` is true when the shape reads only items
    and constants: then it builds from the two columns of pair records (:meth:`pairs`), whose
    records are plain 2-tuples, with no pair id; ``items_read`` says which of their items it reads."""

    def __init__(self, interner: Interner, shape: Shape | None) -> None:
        self.interner = interner
        self.shape = shape
        self.items = self.shape is not None and uses_items(self.shape)
        self.arith = self.shape is not None and uses_arith(self.shape)
        self.from_pairs = self.shape is not None and not uses_record(self.shape)
        # (a record whose arithmetic needs the Python call is passed whole: both items)
        self.items_read = items_read(self.shape) if self.from_pairs and not self.arith else frozenset((0, 1))

    def pairs(self, firsts: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """The outputs of the records ``(firsts[i], seconds[i])`` (``from_pairs`` true): their two
        columns when the shape builds a pair, else their ids (one column); ``None`` when some
        record's arithmetic needs the Python call (the caller then maps the records by their ids).
        The column of an item the shape does not read (not in ``items_read``) may hold any ids of
        the same length."""
        shape, interner, items = self.shape, self.interner, (firsts, seconds)
        ok = np.ones(len(firsts), dtype=bool) if self.arith else None
        if shape[0] == "tuple":
            out = tuple(build(interner, part, (firsts,), items, ok) for part in shape[1])
        else:
            out = (build(interner, shape, (firsts,), items, ok),)  # (``firsts`` gives a constant its length)
        return out if ok is None or ok.all() else None

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``(out, built)``: ``out[i]`` is the id of ``f(record i)`` where ``built[i]`` (``built`` None:
        everywhere); elsewhere ``out`` is undefined and the caller calls ``f``."""
        if not self.items:
            ok = np.ones(len(ids), dtype=bool) if self.arith else None
            return build(self.interner, self.shape, (ids,), None, ok), ok
        built, firsts, seconds = self.interner.plain_pairs(ids)
        out = np.empty(len(ids), dtype=np.int64)
        ok = np.ones(len(firsts), dtype=bool) if self.arith else None
        out[built] = build(self.interner, self.shape, (ids[built],), (firsts, seconds), ok)
        if ok is not None:
            built[built] = ok
        return out, built


class PredicateBuilder:
    """Whether ``p(record)`` holds, for a predicate ``p`` whose body compares two :class:`MapBuilder`
    values or one with an int constant (``lambda r: r[1] > 5``, ``lambda n: n % 2 == 0``, ``lambda r:
    r[0] < r[1]``): from id columns where those values are plain ints; ``shape`` is ``None`` for any
    other predicate."""

    def __init__(self, interner: Interner, p: Callable) -> None:
        shape = shape_of(p, 1, items=True, compare=True)
        self.shape = shape if shape is not None and shape[0] == "compare" else None
        self.interner = interner
        if self.shape is not None:
            self._compare = _COMPARE[self.shape[1]]
            self._values = {part: MapBuilder(interner, part) for part in self.shape[2:] if part[0] != "const"}

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(kept, built)``: ``kept[i]`` (int8) whether ``p(record i)`` holds, where ``built[i]``;
        elsewhere ``kept`` is undefined and the caller calls ``p``."""
        built = np.ones(len(ids), dtype=bool)

        def ids_of(part: Shape) -> np.ndarray:
            values, ok = self._values[part](ids)
            if ok is None:
                return values
            built[~ok] = False
            return np.where(ok, values, ids)  # (where the value was not built: an id in use stands in)

        plain, (x, y), _ = _int_operands(self.interner, self.shape[2:], ids_of)
        built &= plain
        return self._compare(x, y).astype(np.int8), built


def record_builder(interner: Interner, f: Callable) -> PairBuilder | PythonBuilder:
    """The builder of ``f(key, left, right)`` records: from id columns when ``f`` only makes pairs of
    its arguments and constants, else memoized Python calls."""
    shape = shape_of(f)
    return PairBuilder(interner, shape) if shape is not None else PythonBuilder(interner, f)

