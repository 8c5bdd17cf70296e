"""Reduce: per key, an output collection that accumulates at every time to ``logic(input group)``.

When new input updates for a key become complete, the output can change at their times and at the
*joins* of their times with the key's existing input and output times (with partially ordered times,
inside loops, those joins are later times that no single update carries). For each such time ``u``
that is complete, in a linear extension of the partial order, the desired output is
``logic(input accumulated at u)`` and the emitted diff is that minus the output accumulated at ``u``
(history plus what this step already emitted at times ``<= u``). Times not yet complete are kept per
key and revisited when the frontier passes them. Logic never sees an empty group.

With totally ordered times (outside loops) the new times of a key are all later than its history, so
the accumulated output at them is the history's total and the emitted diffs are the first difference
of the desired outputs along time.
"""

from __future__ import annotations

import numpy as np

from ...frontier import Antichain
from ...graph import Node, Scope
from ...kernels.consolidate import outside_int64, sums_fit
from ...kernels.sorting import argsort, distinct
from ...kernels.trie import SMALL
from ...kernels.sorting import unique_rows as distinct_rows
from ...lattice import lex_order
from ...traces.batch import Updates, concat, sum_error
from ...traces.spine import Spine
from .history import KeyHistory
from .kernel import reduce_round, reduce_traced_round
from .logic import Logic, PointOverflow


def unique_rows(times: np.ndarray) -> np.ndarray:
    if len(times) <= 1:
        return times
    return np.unique(times, axis=0)


def join_closure(new: np.ndarray, history: np.ndarray) -> np.ndarray:
    """Every join of one or more ``new`` times with any number of ``history`` times."""
    known = {tuple(r) for r in new.tolist()}
    others = unique_rows(np.concatenate([history, new]))
    fresh = new
    while len(fresh):
        joins = np.maximum(fresh[:, None, :], others[None, :, :]).reshape(-1, new.shape[1])
        added = [r for r in {tuple(r) for r in joins.tolist()} if r not in known]
        known.update(added)
        fresh = np.asarray(added, dtype=np.int64).reshape(-1, new.shape[1])
        if len(fresh):
            others = np.concatenate([others, fresh])
    return np.asarray(sorted(known), dtype=np.int64).reshape(-1, new.shape[1])


def accumulate(vals: np.ndarray, times: np.ndarray, diffs: np.ndarray, at: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``(len(at), len(columns))`` counts: updates with time ``<= at[r]`` summed per val column."""
    out = np.zeros((len(at), len(columns)), dtype=diffs.dtype)
    if len(vals) == 0 or len(columns) == 0:
        return out
    col = np.searchsorted(columns, vals)
    le = np.all(times[None, :, :] <= at[:, None, :], axis=2)
    weighted = le * diffs[None, :]
    for j in np.unique(col).tolist():
        out[:, j] = weighted[:, col == j].sum(axis=1)
    return out




def _key_chunks(keys: np.ndarray, cand_keys: np.ndarray, cand_outer: np.ndarray, size: int):
    """``(keys, candidate keys, candidate outer times)`` in chunks of at most ``size`` keys."""
    if len(keys) <= size:
        yield keys, cand_keys, cand_outer
        return
    o = argsort(cand_keys, runs=True)
    ck, co = cand_keys.take(o), cand_outer.take(o)
    cuts = np.searchsorted(ck, keys[size::size])
    for lo, hi, a, b in zip(range(0, len(keys), size), range(size, len(keys) + size, size),
                            [0, *cuts.tolist()], [*cuts.tolist(), len(ck)]):
        yield keys[lo:hi], ck[a:b], co[a:b]


_NO_KEYS = np.empty(0, dtype=np.int64)
_NO_KEYS.flags.writeable = False


def group_bounds(keys: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.searchsorted(keys, query, "left"), np.searchsorted(keys, query, "right")


class Reduce(Node):
    """Maintains ``logic`` over the groups of an arrangement, with its own output trace.

    Two tactics compute the same output diffs: the compiled one (:mod:`.kernel`) evaluates a round
    whose candidate times share every coordinate but the outer one; the general one (``_general``,
    any times at any depth: the join closure of each key's new and old times, in Python) takes the
    other rounds, and all of them when ``compiled`` is false (the reference the compiled tactic is
    tested against).

    A compiled round reads each key's histories from the traces the first time, then from the rows it
    kept of them (:mod:`.history`: condensed, so a loop's earlier rounds collapse into one row per val
    and outer time) plus the round's new input rows: a round reads the change, not the history.
    ``rows_read``, ``rows_kept`` and ``rows_new`` count the rows compiled rounds read each way."""

    compiled = True
    keeps_history = True  # compiled rounds keep their keys' histories (false: every round looks keys up)
    rounds_compiled = 0  # rounds each tactic evaluated (in instance attributes once counted)
    rounds_general = 0

    observes_frontier = True

    def __init__(self, scope: Scope, arranged, logic: Logic, *, name: str = "reduce") -> None:
        super().__init__(scope, name=name)
        self.handle = arranged.reader(self, 0)
        self.logic = logic
        self._tuning = self.tuning  # the dataflow's, fixed (read in every round)
        self.output = Spine(scope.depth, f"{name}.output", config=self.tuning)
        self.output_handle = self.output.handle()
        d = scope.depth
        self._no_times = np.empty((0, d), dtype=np.int64)
        self._no_input = Updates.empty(2, d)
        self.pending_keys = _NO_KEYS
        self.pending_at = self._no_times
        self._pending_distinct = 0  # pending entries when last deduplicated
        self.history = KeyHistory(d)  # the keys of recent compiled rounds, kept between rounds
        self.rows_read = 0  # history rows compiled rounds read: looked up in the traces,
        self.rows_kept = 0  # read back from ``history``,
        self.rows_new = 0  # and new input rows added to kept keys

    def holds_work(self) -> bool:
        """Times to revisit, or buffered batches (one port: ``Node.holds_work`` without its loop)."""
        return self.pending_at.shape[0] > 0 or bool(self.buffers[0])

    def pending_times(self) -> np.ndarray:
        return np.concatenate([super().pending_times(), self.pending_at])

    def arrangements(self):
        return ((f"{self.label}.output", self.output),)

    def held_ids(self):
        """Buffers and the output trace (``Node.held_ids``), and the keys of the times to revisit."""
        yield from super().held_ids()
        yield self.pending_keys
        yield from self.history.held_ids()

    def step(self, frontier: Antichain) -> None:
        parts = self.buffers[0]  # from the arrangement: complete batches (Node.take_all, without its call)
        if parts:
            self.buffers[0] = []
            new = concat(parts, 2, self.scope.depth) if parts[1:] else parts[0]
        else:
            new = self._no_input
        pending_at = self.pending_at
        if pending_at.shape[0]:
            late, count = frontier.split(pending_at)
            if count == late.shape[0]:  # nothing to revisit yet
                cand_keys, cand_times = new.data[0], new.times
            elif count == 0:  # everything
                cand_keys = np.concatenate([new.data[0], self.pending_keys])
                cand_times = np.concatenate([new.times, pending_at])
                self.pending_keys, self.pending_at = _NO_KEYS, self._no_times
                self._pending_distinct = 0
            else:  # (masks as indices: no method call each)
                ready = ~late
                cand_keys = np.concatenate([new.data[0], self.pending_keys[ready]])
                cand_times = np.concatenate([new.times, pending_at[ready]])
                self.pending_keys, self.pending_at = self.pending_keys[late], pending_at[late]
                if count < self._pending_distinct:
                    self._pending_distinct = count
        else:
            cand_keys, cand_times = new.data[0], new.times
        if cand_keys.shape[0]:
            self._process(cand_keys, cand_times, frontier, new)
        if self.scope.context.in_round:  # the loop's closing pass moves the compaction
            if cand_keys.shape[0] >= self._tuning.round_merge_updates:  # a large round: its batches may merge now
                self.handle.set_physical_compaction(frontier)
                self.output_handle.set_physical_compaction(frontier)
            return
        for h in (self.handle, self.output_handle):
            h.set_compaction(frontier)
            if frontier.is_empty() and not self.holds_work():  # inputs closed for good: no more reads
                h.drop()

    def _histories(self, keys: np.ndarray, inner: np.ndarray, new: Updates) -> tuple[Updates, Updates, bool]:
        """The input and output histories of ``keys`` for a compiled round, and whether to keep them
        after it: the kept rows of the keys the history holds plus their ``new`` input rows, and trace
        lookups for the others. A round of fewer than ``reduce_history_keys`` keys starts no history
        (a lookup of a few keys costs about what keeping them would)."""
        history = self.history
        if history.count and not history.valid_at(inner):
            history.clear()
        if not self.keeps_history or (not history.count and len(keys) < self._tuning.reduce_history_keys):
            inp, out = self.handle.lookup(keys), self.output.lookup(keys)
            self.rows_read += inp.diffs.shape[0] + out.diffs.shape[0]
            return inp, out, False
        entries = history.entries(keys)
        kept = entries >= 0
        n_kept = int(np.count_nonzero(kept))
        if n_kept == 0:
            inp, out = self.handle.lookup(keys), self.output.lookup(keys)
            self.rows_read += len(inp) + len(out)
            return inp, out, True
        hin, hout, n_new = history.gather(keys, entries, new)
        self.rows_kept += len(hin) + len(hout) - n_new
        self.rows_new += n_new
        if n_kept == len(keys):
            return hin, hout, True
        others = keys[~kept]
        inp, out = self.handle.lookup(others), self.output.lookup(others)
        self.rows_read += len(inp) + len(out)
        depth = self.scope.depth
        return concat([inp, hin], 2, depth), concat([out, hout], 2, depth), True

    def _keep(self, keys: np.ndarray, inp: Updates, out: Updates, inner: np.ndarray, frontier: Antichain) -> None:
        """Keep the round's histories of ``keys`` (``out`` with the round's output diffs), condensed to
        the least time a later round can evaluate: the frontier's least outer time and ``inner``."""
        history = self.history
        lowest = min(e[0] for e in frontier.elements) if not frontier.is_empty() else None
        if lowest is None or not history.store(keys, inp, out, np.array([lowest, *inner.tolist()], np.int64)):
            history.clear()
        elif history.rows > self._tuning.reduce_history_rows:
            history.clear()

    def _process(self, cand_keys: np.ndarray, cand_times: np.ndarray, frontier: Antichain, new: Updates) -> None:
        n = cand_keys.shape[0]
        keys = cand_keys.copy()  # sorting.distinct(cand_keys) written out: its sort and mask without their wrappers
        if n > 1:
            keys.sort()
            first = np.empty(n, dtype=bool)
            first[0] = True
            np.not_equal(keys[1:], keys[:-1], out=first[1:])
            keys = keys.compress(first)
        inner = cand_times[0, 1:]
        if self.compiled and (inner.shape[0] == 0 or cand_times.shape[0] == 1 or False not in (cand_times[:, 1:] == inner)):
            size = self._tuning.reduce_chunk_keys
            if keys.shape[0] <= size:  # one chunk (the common case): no copies of the candidates
                traced = self.logic.traced_plan
                if traced is not None and not self.history.count and (
                        not self.keeps_history or keys.shape[0] < self._tuning.reduce_history_keys):
                    # a round that keeps no history: the kernel reads the traces itself
                    h, o = self.handle, self.output_handle  # their tables read without a call while kept
                    table, out_table = h.trace._batch_table, o.trace._batch_table
                    done = reduce_traced_round(
                        keys, cand_keys, cand_times[:, 0], inner,
                        table if table is not None and not h._dropped else h.table(),
                        out_table if out_table is not None and not o._dropped else o.table(), *traced)
                    if done is not None:
                        e, k, t, rows = done
                        self.rows_read += rows
                        if t.shape[0] and frontier.split(t)[1] != t.shape[0]:  # already complete: see below
                            return self._general(cand_keys, cand_times, frontier, self.handle.lookup(keys),
                                                 self.output.lookup(keys))
                        self._add_pending(k, t)
                        self.rounds_compiled += 1
                        return self._publish(e, frontier)
                inp, out, keep = self._histories(keys, inner, new)
                e, k, t = reduce_round(keys, cand_keys, cand_times[:, 0], inner, inp, out, self.logic)
                if t.shape[0] and frontier.split(t)[1] != t.shape[0]:  # a time to revisit that is already complete
                    self.history.clear()
                    return self._general(cand_keys, cand_times, frontier, inp, out)
                if keep:
                    self._keep(keys, inp, concat([out, e], 2, cand_times.shape[1]), inner, frontier)
                self._add_pending(k, t)
                self.rounds_compiled += 1
                return self._publish(e, frontier)
            self.history.clear()
            emitted, pend_k, pend_t = [], [], []
            for chunk_keys, ck, co in _key_chunks(keys, cand_keys, cand_times[:, 0], size):
                inp, out = self.handle.lookup(chunk_keys), self.output.lookup(chunk_keys)
                e, k, t = reduce_round(chunk_keys, ck, co, inner, inp, out, self.logic)
                if not frontier.beyond(t).all():  # a time to revisit that is already complete
                    return self._general(cand_keys, cand_times, frontier, self.handle.lookup(keys),
                                         self.output.lookup(keys))
                emitted.append(e)
                pend_k.append(k)
                pend_t.append(t)
            self._add_pending(np.concatenate(pend_k), np.concatenate(pend_t))
            self.rounds_compiled += 1
            return self._publish(concat(emitted, 2, cand_times.shape[1]), frontier)
        self._general(cand_keys, cand_times, frontier, self.handle.lookup(keys), self.output.lookup(keys))

    def _general(self, cand_keys, cand_times, frontier, inp, out) -> None:
        """Any depth: per key, the join closure of new and history times, evaluated in order."""
        self.rounds_general += 1
        self.history.clear()  # its output diffs are not kept: the next compiled round looks keys up
        keys = distinct(cand_keys)
        inp, out = self._by_key(inp), self._by_key(out)
        order = argsort(cand_keys, runs=True)
        cand_keys, cand_times = cand_keys[order], cand_times[order]
        c_lo, c_hi = group_bounds(cand_keys, keys)
        i_lo, i_hi = group_bounds(inp.data[0], keys)
        o_lo, o_hi = group_bounds(out.data[0], keys)
        emitted_keys, emitted_outs, emitted_times, emitted_diffs = [], [], [], []
        pend_k, pend_t = [], []
        depth = cand_times.shape[1]
        for n, key in enumerate(keys.tolist()):
            times = unique_rows(cand_times[c_lo[n] : c_hi[n]])
            isl = slice(i_lo[n], i_hi[n])
            osl = slice(o_lo[n], o_hi[n])
            if depth > 1:
                history = np.concatenate([inp.times[isl], out.times[osl]])
                times = join_closure(times, unique_rows(history))
            late = frontier.beyond(times)
            if late.any():
                pend_t.append(times[late])
                pend_k.append(np.full(int(late.sum()), key, dtype=np.int64))
                times = times[~late]
            if len(times) == 0:
                continue
            times = times[lex_order(times)]
            res = self._key(key, inp.data[1][isl], inp.times[isl], inp.diffs[isl],
                            out.data[1][osl], out.times[osl], out.diffs[osl], times)
            if res is not None:
                o, t, d = res
                emitted_keys.append(np.full(len(o), key, dtype=np.int64))
                emitted_outs.append(o)
                emitted_times.append(t)
                emitted_diffs.append(d)
        if pend_k:
            self._add_pending(np.concatenate(pend_k), np.concatenate(pend_t))
        if emitted_keys:
            self._publish(Updates(
                (np.concatenate(emitted_keys), np.concatenate(emitted_outs)),
                np.concatenate(emitted_times), np.concatenate(emitted_diffs)), frontier)
        else:
            self.output.advance_upper(frontier)

    def _add_pending(self, keys: np.ndarray, times: np.ndarray) -> None:
        """Keep ``(keys, times)`` to revisit. Repeats are kept (revisiting a time twice changes
        nothing) until the set has doubled since it was last deduplicated; then it is deduplicated
        as a whole (amortized: one pass over it per doubling)."""
        if keys.shape[0]:
            if self.pending_keys.shape[0]:
                self.pending_keys = np.concatenate([self.pending_keys, keys])
                self.pending_at = np.concatenate([self.pending_at, times])
            else:
                self.pending_keys, self.pending_at = keys, times
            n, d = self.pending_keys.shape[0], self._pending_distinct
            if n > 2 * (d if d > 256 else 256):
                self._dedupe_pending()
                self._pending_distinct = len(self.pending_keys)

    def _publish(self, emitted: Updates, frontier: Antichain) -> None:
        """Record output diffs ``(key, out)`` in the output trace and send the output records on."""
        n = emitted.diffs.shape[0]
        if n == 0:
            self.output.advance_upper(frontier)
            return
        if n <= SMALL:  # sealed and given back flat in one kernel call (all its times are complete)
            k, o = emitted.data
            _, u, waiting = self.output.insert_complete(k, o, emitted.times, emitted.diffs, frontier)
            if waiting is not None:
                raise AssertionError(f"{self.label}: output diffs at times beyond the frontier {frontier}")
        else:
            batch = self.output.insert(emitted, frontier)  # consolidated on the way
            u = batch.flat() if batch.n else None
        if u is not None:
            k, o = u.data
            if self.logic.output_is_key:  # one out per key: (key, time) already distinct and sorted
                self.emit(Updates((k,), u.times, u.diffs))
            else:  # (key, out) distinct at each time: as columns, or pair ids
                self.emit_pairs(u)

    def _key(self, key, ivals, itimes, idiffs, ovals, otimes, odiffs, times):
        """Output diffs ``(outs, times, diffs)`` for one key at the complete ``times`` (lex-ordered).

        The sums are exact: int64 when a bound rules out leaving it (an emitted diff is at most
        ``2**len(times)`` residuals, each at most the input and output rows' and the logic's counts),
        else Python ints, refusing an accumulation or an emitted diff outside int64."""
        columns = np.unique(ivals)
        terms = (len(idiffs) + len(odiffs) + len(ivals) + 1) << min(len(times), 64)
        exact = not sums_fit(terms, idiffs, odiffs)
        if exact:
            idiffs, odiffs = idiffs.astype(object), odiffs.astype(object)
        acc = accumulate(ivals, itimes, idiffs, times, columns)
        rows, cols = np.nonzero(acc)
        if exact:
            self._refuse(key, columns[cols], times[rows], acc[rows, cols])
        offs = np.searchsorted(rows, np.arange(len(times) + 1))
        try:
            pts, out_ids, counts = self.logic.evaluate(
                np.full(len(times), key, dtype=np.int64), offs, columns[cols], acc[rows, cols].astype(np.int64))
        except PointOverflow as exc:
            raise sum_error((key,), tuple(times[exc.point].tolist())) from exc
        if not exact and not sums_fit(terms, counts):
            exact = True
            odiffs = odiffs.astype(object)
        all_outs = np.unique(np.concatenate([out_ids, ovals]))
        desired = np.zeros((len(times), len(all_outs)), dtype=object if exact else np.int64)
        np.add.at(desired, (pts, np.searchsorted(all_outs, out_ids)), counts.astype(desired.dtype))
        residual = desired - accumulate(ovals, otimes, odiffs, times, all_outs)
        if times.shape[1] == 1:
            emit = np.diff(residual, axis=0, prepend=np.zeros((1, len(all_outs)), dtype=residual.dtype))
        else:
            emit = np.zeros_like(residual)
            le = np.all(times[None, :, :] <= times[:, None, :], axis=2)
            for r in range(len(times)):
                emit[r] = residual[r] - le[r, :r].astype(emit.dtype) @ emit[:r]
        rows, cols = np.nonzero(emit)
        if len(rows) == 0:
            return None
        if exact:
            self._refuse(key, all_outs[cols], times[rows], emit[rows, cols])
        return all_outs[cols], times[rows], emit[rows, cols].astype(np.int64)

    @staticmethod
    def _refuse(key: int, vals: np.ndarray, times: np.ndarray, sums: np.ndarray) -> None:
        """Raise for the first of the exact ``sums`` (of ``(key, val)`` at ``times``) outside int64."""
        bad = np.flatnonzero(outside_int64(sums))
        if len(bad):
            i = int(bad[0])
            raise sum_error((int(key), int(vals[i])), tuple(times[i].tolist()))

    def _by_key(self, u: Updates) -> Updates:
        return u.take(argsort(u.data[0], runs=True)) if len(u) else u

    def _dedupe_pending(self) -> None:
        if len(self.pending_keys) > 1:
            cols = distinct_rows((self.pending_keys, *self.pending_at.T))
            self.pending_keys, self.pending_at = cols[0], np.stack(cols[1:], axis=1)
