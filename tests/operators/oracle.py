"""A from-scratch oracle for ddflow dataflows: recompute every operator on accumulated collections.

The engine maintains difference traces; the oracle does none of that. To know a dataflow's output
at time ``t`` it accumulates each input at ``t`` (the sum of diffs at times ``<= t``), then applies
each operator's definition to plain dicts ``{record: multiplicity}`` (zeros absent), exactly as
stated in ``notes/SEMANTICS.md``. ``iterate`` is a naive fixed-point loop ``v_{i+1} = body(v_i)``
from ``v_0 = input``; nested loops are nested Python loops.

:class:`Bag` mirrors the public ``Collection`` methods, so one pipeline function
``f(*collections) -> collection`` builds both the engine dataflow and the oracle's answer:
``f(*(Bag(source.accumulate(t)) for source in sources)).counts``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

Counts = dict[Hashable, int]

MAX_ROUNDS = 10_000


class OracleError(Exception):
    """The oracle cannot evaluate a pipeline (bad shape, a loop that does not converge)."""


def _clean(counts: Mapping[Hashable, int]) -> Counts:
    return {record: count for record, count in counts.items() if count != 0}


def _add(into: Counts, record: Hashable, count: int) -> None:
    into[record] = into.get(record, 0) + count


def _pair(record: Any, step: str) -> tuple[Any, Any]:
    if not (isinstance(record, tuple) and len(record) == 2):
        raise OracleError(f"{step}: record {record!r} is not a (key, val) pair")
    return record


def _groups(counts: Counts, step: str) -> dict[Hashable, list[tuple[Any, int]]]:
    """key -> [(val, count), ...] sorted by val, non-zero counts only."""
    groups: dict[Hashable, list[tuple[Any, int]]] = {}
    for record, count in counts.items():
        key, val = _pair(record, step)
        groups.setdefault(key, []).append((val, count))
    for vals in groups.values():
        vals.sort(key=lambda vc: vc[0])
    return groups


class Scope:
    """Stands in for a loop scope; entering one is the identity for accumulated collections."""


class Bag:
    """An accumulated collection with the engine's ``Collection`` methods, evaluated eagerly."""

    def __init__(self, counts: Mapping[Hashable, int] | None = None, scope: Scope | None = None):
        self.counts: Counts = _clean(counts or {})
        self.scope = scope if scope is not None else Scope()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bag) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"Bag({self.counts!r})"

    # -- linear -------------------------------------------------------------------------------

    def map(self, f: Callable[[Any], Any]) -> Bag:
        out: Counts = {}
        for record, count in self.counts.items():
            _add(out, f(record), count)
        return Bag(out)

    def filter(self, p: Callable[[Any], bool]) -> Bag:
        return Bag({r: c for r, c in self.counts.items() if p(r)})

    def flat_map(self, f: Callable[[Any], Iterable[Any]]) -> Bag:
        out: Counts = {}
        for record, count in self.counts.items():
            for produced in f(record):
                _add(out, produced, count)
        return Bag(out)

    def concat(self, *others: Bag | Arranged) -> Bag:
        out = dict(self.counts)
        for other in others:
            for record, count in _bag(other).counts.items():
                _add(out, record, count)
        return Bag(out)

    def negate(self) -> Bag:
        return Bag({r: -c for r, c in self.counts.items()})

    def consolidate(self) -> Bag:
        return Bag(self.counts)

    def inspect(self, f: Callable[[Any, int, int], Any]) -> Bag:
        return Bag(self.counts)

    def enter(self, scope: Any) -> Bag:
        return Bag(self.counts)

    # -- keyed --------------------------------------------------------------------------------

    def join(self, other: Bag | Arranged) -> Bag:
        return self.join_map(other, lambda key, a, b: (key, (a, b)))

    def join_map(self, other: Bag | Arranged, f: Callable[[Any, Any, Any], Any]) -> Bag:
        right: dict[Hashable, list[tuple[Any, int]]] = _groups(_bag(other).counts, "join")
        out: Counts = {}
        for record, count in self.counts.items():
            key, va = _pair(record, "join")
            for vb, other_count in right.get(key, ()):
                _add(out, f(key, va, vb), count * other_count)
        return Bag(out)

    def semijoin(self, keys: Bag | Arranged) -> Bag:
        key_counts = _keys_of(keys)
        out: Counts = {}
        for record, count in self.counts.items():
            key, _ = _pair(record, "semijoin")
            if key in key_counts:
                _add(out, record, count * key_counts[key])
        return Bag(out)

    def antijoin(self, keys: Bag | Arranged) -> Bag:
        return self.concat(self.semijoin(keys).negate())

    def reduce(self, f: Callable[[Any, list[tuple[Any, int]]], Iterable[tuple[Any, int]]]) -> Bag:
        out: Counts = {}
        for key, vals in _groups(self.counts, "reduce").items():
            for produced, count in f(key, list(vals)):
                _add(out, (key, produced), count)
        return Bag(out)

    def min(self) -> Bag:
        return self._extreme(min)

    def max(self) -> Bag:
        return self._extreme(max)

    def _extreme(self, pick: Callable[..., Any]) -> Bag:
        out: Counts = {}
        for key, vals in _groups(self.counts, "min/max").items():
            positive = [val for val, count in vals if count > 0]
            if positive:
                _add(out, (key, pick(positive)), 1)
        return Bag(out)

    def sum(self) -> Bag:
        out: Counts = {}
        for key, vals in _groups(self.counts, "sum").items():
            _add(out, (key, sum(val * count for val, count in vals)), 1)
        return Bag(out)

    def top_k(self, k: int) -> Bag:
        out: Counts = {}
        for key, vals in _groups(self.counts, "top_k").items():
            slots = k
            for val, count in sorted(vals, key=lambda vc: vc[0], reverse=True):
                if slots == 0:
                    break
                if count > 0:
                    taken = min(count, slots)
                    _add(out, (key, val), taken)
                    slots -= taken
        return Bag(out)

    # -- whole records ------------------------------------------------------------------------

    def count(self) -> Bag:
        return Bag({(record, count): 1 for record, count in self.counts.items()})

    def distinct(self) -> Bag:
        return Bag({record: 1 for record, count in self.counts.items() if count > 0})

    def threshold(self, f: Callable[[Any, int], int]) -> Bag:
        return Bag({record: f(record, count) for record, count in self.counts.items()})

    # -- arrangements and iteration -----------------------------------------------------------

    def arrange_by_key(self) -> Arranged:
        for record in self.counts:
            _pair(record, "arrange_by_key")
        return Arranged(self, by_self=False)

    def arrange_by_self(self) -> Arranged:
        return Arranged(self, by_self=True)

    def iterate(self, body: Callable[[Bag], Bag | Arranged]) -> Bag:
        scope = Scope()
        current = Bag(self.counts, scope)
        for _ in range(MAX_ROUNDS):
            following = Bag(_bag(body(current)).counts, scope)
            if following == current:
                return Bag(current.counts)
            current = following
        raise OracleError(f"iterate: no fixed point after {MAX_ROUNDS} rounds")


class Arranged:
    """An arranged collection: the same methods, reading the same accumulated records."""

    def __init__(self, bag: Bag, *, by_self: bool):
        self.collection = Bag(bag.counts)
        self.by_self = by_self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collection, name)


def _bag(x: Bag | Arranged) -> Bag:
    return x.collection if isinstance(x, Arranged) else x


def _keys_of(keys: Bag | Arranged) -> Counts:
    """The key multiplicities of a semijoin/antijoin argument (a collection of key records)."""
    if isinstance(keys, Arranged) and not keys.by_self:
        raise OracleError("semijoin: keys arranged by key; the oracle expects key records")
    return _bag(keys).counts


def evaluate(pipeline: Callable[..., Any], inputs: Iterable[Mapping[Hashable, int]]) -> list[Counts]:
    """Apply ``pipeline`` to the accumulated inputs; return each output's counts."""
    result = pipeline(*(Bag(counts) for counts in inputs))
    outputs = result if isinstance(result, (tuple, list)) else [result]
    return [_bag(output).counts for output in outputs]
