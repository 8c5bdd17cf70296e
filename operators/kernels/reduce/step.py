"""A reduction round whose logic the kernel finishes (distinct, min, max, top_k) in one call.

:func:`~ddflow.operators.kernels.reduce.reduce_points` gives a round's points and desired output
triples; for the modes in :data:`FINISHED` those triples are the logic's desired output already, so
nothing in Python has to see them before
:func:`~ddflow.operators.kernels.reduce.diffs.reduce_emit` turns them into output diffs.
:func:`reduce_step` runs the two kernels back to back in compiled code: a round of such a reduction
is one kernel call, and the points and triples never become Python objects.
:func:`reduce_traced_step` also looks the round's keys up in the input and output traces (their batch
tables) in the same call, for a logic whose slots are ordered by the val ids themselves (distinct):
the histories never become Python objects either.
"""

from __future__ import annotations

import numpy as np

from .. import kernel
from ..lookup import lookup, lookup_reference
from .diffs import reduce_emit, reduce_emit_reference
from .points import DIFF_OVERFLOW, LEAST, OK, POSITIVE, TOP, reduce_points, reduce_points_reference

FINISHED = (LEAST, TOP, POSITIVE)  # modes whose triples are the desired output (``Logic.finish`` keeps them)


@kernel
def reduce_step(keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_v, out_t, out_d, inner, mode, k):
    """Output diffs of one round of a reduction in a mode of :data:`FINISHED`.

    Entry: as :func:`~ddflow.operators.kernels.reduce.reduce_points` (``mode``, ``k`` included), with
    the output rows' vals and diffs ``out_v``, ``out_d`` beside ``out_k``, ``out_t``.

    Returns ``(key, out, time, diff, pend_k, pend_t, status, emitted, bad_key, bad_outer)``: the
    output diffs as :func:`~ddflow.operators.kernels.reduce.diffs.reduce_emit` returns them (with its
    status, ``emitted``), the times to revisit as ``reduce_points`` returns them, and its ``status``.
    When ``status`` is not ``OK`` the diffs are empty, and with ``DIFF_OVERFLOW`` ``(bad_key,
    bad_outer)`` is the key id and outer time of the point whose accumulation leaves int64."""
    first, pk, pa, dp, dv, dc, pend_k, pend_t, status, at = reduce_points(
        keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_t, inner, mode, k)
    if status != OK:
        bad_key, bad_outer = 0, 0
        if status == DIFF_OVERFLOW:
            bad_key, bad_outer = keys[pk[at]], pa[at]
        none = np.empty(0, np.int64)
        return (none, none, np.empty((0, out_t.shape[1]), np.int64), none, pend_k, pend_t, status, OK,
                bad_key, bad_outer)
    ek, eo, et, ed, emitted = reduce_emit(keys, first, pk, pa, dp, dv, dc, out_k, out_v, out_t, out_d, inner)
    return ek, eo, et, ed, pend_k, pend_t, status, emitted, 0, 0


def reduce_step_reference(keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_v, out_t, out_d, inner,
                          mode, k):
    """:func:`reduce_step` from the two references: ``(diffs, pend_k, pend_t, status, at_point)`` with
    ``diffs`` the ``{(key, out, outer time): diff}`` of
    :func:`~ddflow.operators.kernels.reduce.diffs.reduce_emit_reference` (``None`` unless ``status`` is
    ``OK``) and ``at_point`` the ``(key id, outer time)`` of the first point that overflows, if any."""
    first, pk, pa, dp, dv, dc, pend_k, pend_t, status, at = reduce_points_reference(
        keys, cand_k, cand_t, in_k, in_v, in_o, in_t, in_d, out_k, out_t, inner, mode, k)
    if status != OK:
        return None, pend_k, pend_t, status, (int(keys[pk[at]]), int(pa[at])) if status == DIFF_OVERFLOW else None
    diffs = reduce_emit_reference(keys, first, pk, pa, dp, dv, dc, out_k, out_v, out_t, out_d, inner)
    return diffs, pend_k, pend_t, status, None


@kernel
def reduce_traced_step(keys, cand_k, cand_t, in_table, out_table, inner, mode, k):
    """:func:`reduce_step` on the histories of ``keys`` read from two traces, with the vals as their
    own order (``in_o`` is ``in_v``: the slots of ``POSITIVE``, as distinct plans them).

    Entry: ``keys``, ``cand_k``, ``cand_t``, ``inner``, ``mode`` (of :data:`FINISHED`), ``k`` as for
    :func:`reduce_step`; ``in_table``, ``out_table``: the batch tables (rows ``(address, nk, nv, n)``)
    of the input and output traces, whose times have ``d = len(inner) + 1`` coordinates, as
    :func:`~ddflow.operators.kernels.lookup.lookup` takes them.

    Returns ``(out, n, m, status, emitted, bad_key, bad_outer, rows)``: :func:`reduce_step`'s ``n``
    output diffs and ``m`` times to revisit as the columns of one array (one array to hand back
    instead of six): keys ``out[:n]``, outs ``out[n:2n]``, diffs ``out[2n:3n]``, times
    ``out[3n:3n + n * d]`` (row-major ``(n, d)``), then the keys to revisit (``m``) and their times
    (row-major ``(m, d)``); its statuses and overflow point; and the history rows read from the two
    traces."""
    depth = inner.shape[0] + 1
    in_k, in_v, in_t, in_d = lookup(keys, in_table, depth)
    out_k, out_v, out_t, out_d = lookup(keys, out_table, depth)
    ek, eo, et, ed, pend_k, pend_t, status, emitted, bad_key, bad_outer = reduce_step(
        keys, cand_k, cand_t, in_k, in_v, in_v, in_t, in_d, out_k, out_v, out_t, out_d, inner, mode, k)
    n, m = ek.shape[0], pend_k.shape[0]
    out = np.empty(n * (3 + depth) + m * (1 + depth), np.int64)
    at = n * (3 + depth)
    for i in range(n):
        out[i], out[n + i], out[2 * n + i] = ek[i], eo[i], ed[i]
        for c in range(depth):
            out[3 * n + i * depth + c] = et[i, c]
    for i in range(m):
        out[at + i] = pend_k[i]
        for c in range(depth):
            out[at + m + i * depth + c] = pend_t[i, c]
    return out, n, m, status, emitted, bad_key, bad_outer, in_k.shape[0] + out_k.shape[0]


def reduce_traced_step_reference(keys, cand_k, cand_t, in_batches, out_batches, inner, mode, k):
    """:func:`reduce_traced_step` from the references: :func:`reduce_step_reference` of the rows
    :func:`~ddflow.operators.kernels.lookup.lookup_reference` finds in ``in_batches`` and
    ``out_batches`` (flat ``(keys, vals, times, diffs)`` per batch), and the number of those rows."""
    in_k, in_v, in_t, in_d = _rows(lookup_reference(keys, in_batches), inner)
    out_k, out_v, out_t, out_d = _rows(lookup_reference(keys, out_batches), inner)
    got = reduce_step_reference(keys, cand_k, cand_t, in_k, in_v, in_v, in_t, in_d, out_k, out_v, out_t, out_d,
                                inner, mode, k)
    return (*got, len(in_k) + len(out_k))


def _rows(found, inner):
    """Looked-up columns with times of ``len(inner) + 1`` coordinates (also when none were found)."""
    k, v, t, d = found
    return k, v, t.reshape(len(k), len(inner) + 1), d
