"""Join: the bilinear operator on two arranged collections with equal keys.

New updates ``dA`` and ``dB`` (complete batches from each arrangement) produce
``dA ⋈ B + A ⋈ dB - dA ⋈ dB`` where ``A`` and ``B`` are the traces *including* the new batches, so each
pair of updates is matched exactly once. A matched pair at times ``s`` and ``t`` yields an output at
``join(s, t)`` with the product of the diffs. Key matching is one ``searchsorted`` over each side.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frontier import Antichain
from ..graph import Node, Scope
from ..kernels.consolidate import INT64_LIMIT, magnitude, outside_int64
from ..kernels.gather import ranges_to_index
from ..kernels.sorting import argsort, distinct
from ..traces.batch import Updates, consolidate, sum_error


def match(left: Updates, right: Updates) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)`` with ``left.key[i] == right.key[j]``."""
    if len(left) == 0 or len(right) == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e
    order = argsort(right.data[0], runs=True)  # often trace lookups: sorted runs
    rk = right.data[0].take(order)
    lk = left.data[0]
    lo = np.searchsorted(rk, lk, "left")
    hi = np.searchsorted(rk, lk, "right")
    li = np.repeat(np.arange(len(lk), dtype=np.int64), hi - lo)
    rj = order.take(ranges_to_index(lo, hi))
    return li, rj


def product(left: Updates, right: Updates) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(key, left val, right val, time, diff)`` columns of every matched pair."""
    li, rj = match(left, right)
    cols = (
        left.data[0].take(li),
        left.data[1].take(li),
        right.data[1].take(rj),
        np.maximum(left.times.take(li, axis=0), right.times.take(rj, axis=0)),
    )
    a, b = left.diffs.take(li), right.diffs.take(rj)
    if magnitude(a) * magnitude(b) < INT64_LIMIT:
        return (*cols, a * b)
    bad = np.flatnonzero(outside_int64(a.astype(object) * b.astype(object)))
    if len(bad):  # a product of diffs outside int64 is refused, never wrapped
        i = int(bad[0])
        raise sum_error((int(cols[0][i]), int(cols[1][i]), int(cols[2][i])), tuple(cols[3][i].tolist()))
    return (*cols, a * b)


def negated(cols: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """``product`` columns with their diffs negated (the least int64 has no negation: refused)."""
    *rest, d = cols
    if len(d) and int(d.min()) == -INT64_LIMIT:
        i = int(np.argmin(d))
        raise sum_error((int(rest[0][i]), int(rest[1][i]), int(rest[2][i])), tuple(rest[3][i].tolist()))
    return (*rest, -d)


class Join(Node):
    """Joins two arrangements; ``output(keys, left vals, right vals) -> record ids`` builds the records."""

    observes_frontier = True  # compaction of its handles follows the frontier

    def __init__(self, scope: Scope, left, right, output: Callable, *, name: str = "join") -> None:
        super().__init__(scope, ports=2, name=name)
        self.left_handle = left.reader(self, 0)
        self.right_handle = right.reader(self, 1)
        self.output = output

    def step(self, frontier: Antichain) -> None:
        d_a = self.take_complete(frontier, 0, 2)
        d_b = self.take_complete(frontier, 1, 2)
        if len(d_a) or len(d_b):
            parts = []
            if len(d_a):
                parts.append(product(d_a, self.right_handle.lookup(distinct(d_a.data[0]))))
            if len(d_b):
                parts.append(product(self.left_handle.lookup(distinct(d_b.data[0])), d_b))
            if len(d_a) and len(d_b):
                parts.append(negated(product(d_a, d_b)))
            cols = [np.concatenate([p[i] for p in parts]) for i in range(5)]
            out = consolidate(Updates((cols[0], cols[1], cols[2]), cols[3], cols[4]))
            if len(out):
                ids = self.output(*out.data)
                self.emit(consolidate(Updates((ids,), out.times, out.diffs)))
        for h in (self.left_handle, self.right_handle):
            h.set_logical_compaction(frontier)
            h.set_physical_compaction(frontier)
            if frontier.is_empty() and not self.holds_work():  # inputs closed for good: no more reads
                h.drop()
