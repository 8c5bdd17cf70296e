"""The compiled tactic of a reduction: every candidate key of a round in one or two kernel calls.

A round's candidates share every time coordinate but the outer one (always so outside loops, and
inside a loop when one round of one iteration completes). :func:`reduce_round` hands the candidates
and the histories of their keys to :func:`ddflow.operators.kernels.reduce.reduce_points`, which finds
every point where the output may change and evaluates the logic there (built-in logics inside the
kernel, Python logic on the groups it returns), then to
:func:`~ddflow.operators.kernels.reduce.diffs.reduce_emit` for the output diffs (consolidated).
History rows at later inner coordinates come back as times to revisit. A logic whose desired output
is the kernel's own (distinct, min, max, top_k: ``reduce.step.FINISHED``) runs both kernels in one
call, :func:`~ddflow.operators.kernels.reduce.step.reduce_step`.
"""

from __future__ import annotations

import numpy as np

from ...kernels.reduce import DIFF_OVERFLOW, GROUPS, POSITIVE, VALUE_OVERFLOW, reduce_points
from ...kernels.reduce.diffs import OK, reduce_emit
from ...kernels.reduce.step import FINISHED, reduce_step, reduce_traced_step
from ...traces.batch import Updates, keyed_columns, sum_error
from ...traces.trie import int64
from .logic import Logic, PointOverflow


_c = int64  # C-contiguous int64 columns: the kernels' one signature
_INT64 = np.dtype(np.int64)
_NO_TIMES = {d: np.empty((0, d), dtype=np.int64) for d in range(1, 5)}  # no times to revisit, by depth
for _none in _NO_TIMES.values():
    _none.flags.writeable = False


def reduce_round(keys: np.ndarray, cand_keys: np.ndarray, cand_outer: np.ndarray, inner: np.ndarray,
                 inp: Updates, out: Updates, logic: Logic) -> tuple[Updates, np.ndarray, np.ndarray]:
    """``(output diffs, keys to revisit, times to revisit)`` for one round.

    ``keys``: the sorted distinct candidate keys; ``cand_outer``: the candidates' outer times;
    ``inner``: the inner coordinates all candidates share (empty at depth 1); ``inp`` and ``out``: the
    input and output histories of ``keys`` (``data == (key, val)``, any order). The output diffs are
    consolidated, sorted by ``(key, out, time)``. An accumulation outside int64 raises ``DiffError``
    naming the key and time. ``inp`` and ``out`` hold C-contiguous int64 columns, as trace lookups give them."""
    inner = _c(inner)
    in_k, in_v, in_t, in_d = keyed_columns(inp)  # lookups: int64 columns
    out_k, out_v, out_t, out_d = keyed_columns(out)
    cand_keys, cand_outer = _c(cand_keys), _c(cand_outer)
    mode, order, k = logic.plan(in_v)
    if mode in FINISHED:
        ek, eo, et, ed, pend_k, pend_t, status, emitted, bad_key, bad_outer = reduce_step(
            keys, cand_keys, cand_outer, in_k, in_v, _c(order), in_t, in_d, out_k, out_v, out_t, out_d, inner, mode, k)
        if status == DIFF_OVERFLOW:
            raise sum_error((int(bad_key),), (int(bad_outer), *inner.tolist()))
        if emitted != OK:
            raise sum_error((int(ek[-1]), int(eo[-1])), tuple(et[-1].tolist()))
        if status == OK:
            return Updates((ek, eo), et, ed), pend_k, pend_t
        # VALUE_OVERFLOW (a mode summing vals): the rounds below sum in Python
    while True:
        first, pk, pa, dp, dv, dc, pend_k, pend_t, status, at = reduce_points(
            keys, cand_keys, cand_outer, in_k, in_v, _c(order), in_t, in_d, out_k, out_t, inner, mode, k)
        if status != VALUE_OVERFLOW:
            break
        mode, order, k = GROUPS, in_v, 0  # a sum beyond int64: summed in Python

    def when(outer: int) -> tuple[int, ...]:
        return (int(outer), *inner.tolist())

    if status == DIFF_OVERFLOW:  # the key's input accumulated at the point leaves int64
        raise sum_error((int(keys[pk[at]]),), when(pa[at]))
    try:
        if mode != POSITIVE:  # POSITIVE's triples are the desired output already
            dp, dv, dc = logic.finish(mode, keys.take(pk), dp, dv, dc)
    except PointOverflow as exc:  # counts of a point's group (or of one of its outputs) leave int64
        raise sum_error((int(keys[pk[exc.point]]),), when(pa[exc.point])) from exc
    ek, eo, et, ed, status = reduce_emit(keys, first, pk, pa, _c(dp), _c(dv), _c(dc), out_k, out_v, out_t,
                                         out_d, inner)
    if status != OK:  # a diff of -2**63 (no negation in int64) or a sum outside int64, in the last row
        raise sum_error((int(ek[-1]), int(eo[-1])), tuple(et[-1].tolist()))
    return Updates((ek, eo), et, ed), pend_k, pend_t


def reduce_traced_round(keys: np.ndarray, cand_keys: np.ndarray, cand_outer: np.ndarray, inner: np.ndarray,
                        in_table: np.ndarray, out_table: np.ndarray, mode: int, k: int
                        ) -> tuple[Updates, np.ndarray, np.ndarray, int] | None:
    """:func:`reduce_round` for a logic whose ``traced_plan`` is ``(mode, k)``, reading the histories
    of ``keys`` from the input and output traces' batch tables (``TraceHandle.table``) in the same
    kernel call: ``(output diffs, keys to revisit, times to revisit, history rows read)``, or
    ``None`` when the round needs what only :func:`reduce_round` does (a sum beyond int64)."""
    if cand_keys.dtype != _INT64 or not cand_keys.flags.c_contiguous:  # C-contiguous int64, as _c makes them
        cand_keys = _c(cand_keys)
    if cand_outer.dtype != _INT64 or not cand_outer.flags.c_contiguous:  # of several coordinates: strided
        cand_outer = _c(cand_outer)
    if inner.dtype != _INT64 or not inner.flags.c_contiguous:
        inner = _c(inner)
    out, n, m, status, emitted, bad_key, bad_outer, rows = reduce_traced_step(
        keys, cand_keys, cand_outer, in_table, out_table, inner, mode, k)
    if status == DIFF_OVERFLOW:
        raise sum_error((int(bad_key),), (int(bad_outer), *inner.tolist()))
    if status != OK:
        return None
    d = inner.shape[0] + 1
    at = n * (3 + d)
    ek, eo, ed, et = out[:n], out[n : 2 * n], out[2 * n : 3 * n], out[3 * n : at].reshape(n, d)
    if emitted != OK:
        raise sum_error((int(ek[-1]), int(eo[-1])), tuple(et[-1].tolist()))
    pend_k, pend_t = out[at : at + m], (out[at + m :].reshape(m, d) if m or d not in _NO_TIMES else _NO_TIMES[d])
    return Updates((ek, eo), et, ed), pend_k, pend_t, rows
