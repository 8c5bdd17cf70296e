"""Join: the bilinear operator on two arranged collections with equal keys.

New updates ``dA`` and ``dB`` (complete batches from each arrangement) produce
``dA ⋈ B + A ⋈ dB - dA ⋈ dB`` where ``A`` and ``B`` are the traces *including* the new batches, so each
pair of updates is matched exactly once. A matched pair at times ``s`` and ``t`` yields an output at
``join(s, t)`` with the product of the diffs. A product of changes against a trace is two compiled
calls: the trace's lookup of the changes' keys (one pass over its batches), and
:func:`ddflow.operators.kernels.join.join_sorted`, which pairs the two key-sorted sides and builds the
output columns; the output records are then built from the id columns (see :mod:`.records`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frontier import Antichain
from ..graph import Node, Scope
from ..kernels.join import join_sorted, join_traced
from ..kernels.sorting import argsort
from ..traces.batch import Updates, concat, consolidate, sum_error
from ..traces.trie import int64

Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def by_key(u: Updates) -> Updates:
    """``u`` sorted by key (rows of one key in any order), as C-contiguous int64 columns."""
    k = u.data[0]
    if len(k) > 1 and not (k[1:] >= k[:-1]).all():
        u = u.take(argsort(k, runs=True))
    return Updates((int64(u.data[0]), int64(u.data[1])), int64(u.times), int64(u.diffs))


def product(a: Updates, b: Updates, sign: int = 1) -> Columns:
    """``(key, a val, b val, time, diff)`` columns of every pair of rows of ``a`` and ``b`` (each sorted
    by key, see :func:`by_key`) under the same key; diffs multiplied by ``sign``. A product outside
    int64 raises ``DiffError`` naming the key, both vals and the time."""
    k, va, vb, t, d, bad = join_sorted(a.data[0], a.data[1], a.times, a.diffs, b.data[0], b.data[1], b.times,
                                       b.diffs, sign)
    if bad >= 0:  # a product of diffs outside int64 is refused, never wrapped
        raise sum_error((int(k[bad]), int(va[bad]), int(vb[bad])), tuple(t[bad].tolist()))
    return k, va, vb, t, d


def traced(changes: Updates, table: np.ndarray, changes_first: bool) -> Columns:
    """:func:`product` of ``changes`` (sorted by key, see :func:`by_key`) and the rows of the trace
    whose batch table is ``table`` (``TraceHandle.table``) under their keys: ``changes`` as the left
    side when ``changes_first``, else as the right side."""
    k, v = changes.data
    times = changes.times
    out, n, bad = join_traced(k, v, times, changes.diffs, table, changes_first)
    k, va, vb, d, t = out[:n], out[n : 2 * n], out[2 * n : 3 * n], out[3 * n : 4 * n], out[4 * n :]
    t = t.reshape(n, times.shape[1])
    if bad >= 0:
        raise sum_error((int(k[bad]), int(va[bad]), int(vb[bad])), tuple(t[bad].tolist()))
    return k, va, vb, t, d


class Join(Node):
    """Joins two arrangements; ``output(keys, left vals, right vals) -> record ids`` builds the records
    (``output.python``: it runs user code per new record, which then sees only consolidated rows)."""

    observes_frontier = True  # compaction of its handles follows the frontier

    def __init__(self, scope: Scope, left, right, output: Callable, *, name: str = "join") -> None:
        super().__init__(scope, ports=2, name=name)
        self.left_handle = left.reader(self, 0)
        self.right_handle = right.reader(self, 1)
        self.output = output
        self._python = getattr(output, "python", True)  # the builder runs user code (its class says)
        self._pairs = None if self._python else getattr(output, "pairs", None)  # the records as pair columns
        self._no_changes = Updates.empty(2, scope.depth)

    def step(self, frontier: Antichain) -> None:
        # an arrangement sends only complete batches, in the pass of the frontier they are complete
        # for: everything buffered is complete (no split by the frontier)
        buffers = self.buffers
        d_a = self._take_by_key(0) if buffers[0] else self._no_changes
        d_b = self._take_by_key(1) if buffers[1] else self._no_changes
        n_a, n_b = d_a.diffs.shape[0], d_b.diffs.shape[0]
        if n_a or n_b:
            parts: list[Columns] = []  # the non-empty products
            if n_a:  # the changes paired with the other trace's rows under their keys, in one kernel call
                h = self.right_handle  # its table read without a call while the trace keeps it
                table = h.trace._batch_table
                p = traced(d_a, table if table is not None and not h._dropped else h.table(), True)
                if p[0].shape[0]:
                    parts.append(p)
            if n_b:
                h = self.left_handle
                table = h.trace._batch_table
                p = traced(d_b, table if table is not None and not h._dropped else h.table(), False)
                if p[0].shape[0]:
                    parts.append(p)
                if n_a:
                    p = product(d_a, d_b, -1)
                    if p[0].shape[0]:
                        parts.append(p)
            if parts:
                self._emit(parts)
        if self.scope.context.in_round:  # the loop's closing pass moves the compaction
            if n_a + n_b >= self.tuning.round_merge_updates:  # a large round: its batches may merge now
                self.left_handle.set_physical_compaction(frontier)
                self.right_handle.set_physical_compaction(frontier)
            return
        for h in (self.left_handle, self.right_handle):
            h.set_compaction(frontier)
            if frontier.is_empty() and not self.holds_work():  # inputs closed for good: no more reads
                h.drop()

    def _take_by_key(self, port: int) -> Updates:
        """The updates buffered on ``port``, sorted by key as int64 columns: one batch of the
        arrangement is (a trie's rows, flat), several are concatenated and sorted."""
        parts = self.buffers[port]
        if not parts:
            return self._no_changes
        self.buffers[port] = []
        if not parts[1:]:
            return parts[0]
        return by_key(concat(parts, 2, self.scope.depth))

    def _emit(self, parts: list[Columns]) -> None:
        """Build the records of the non-empty products ``parts`` and send them on, consolidated."""
        if not parts[1:]:
            k, a, b, t, d = parts[0]
        else:
            k, a, b, t, d = (np.concatenate([p[i] for p in parts]) for i in range(5))
        if self._python:  # user code sees each record once, consolidated
            u = consolidate(Updates((k, a, b), t, d))
            if not len(u):
                return
            (k, a, b), t, d = u.data, u.times, u.diffs
        if self._pairs is not None:  # records built as pairs of columns: so where a consumer takes them
            for node, _port in self.consumers:
                if node.pair_columns:
                    columns = self._pairs(k, a, b)
                    if columns is not None:
                        return self.emit_pairs(consolidate(Updates(columns, t, d)))
                    break
        ids = self.output(k, a, b)
        self.emit(consolidate(Updates((ids,), t, d)))

