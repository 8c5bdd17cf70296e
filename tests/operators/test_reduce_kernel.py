"""The vectorized reduce kernel's min/max probing against a brute-force reading of the same rows:
per point, the least (greatest) val whose count up to the point's time is positive. Few probes per
point force the fall-back to full accumulation for the points whose first vals are all retracted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.operators.nodes.reduce import kernel as reduce_kernel
from ddflow.operators.nodes.reduce.logic import Extremum
from ddflow.operators.traces.batch import Updates
from ddflow.operators.values.interner import Interner

rows_st = st.lists(st.tuples(st.integers(0, 3), st.integers(-4, 6), st.integers(0, 5), st.integers(-2, 2)),
                   max_size=40)
points_st = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=12, unique=True)


def brute(rows, point, largest):
    key, at = point
    counts: dict[int, int] = {}
    for k, v, t, d in rows:
        if k == key and t <= at:
            counts[v] = counts.get(v, 0) + d
    positive = [v for v, c in counts.items() if c > 0]
    return (max(positive) if largest else min(positive)) if positive else None


@pytest.mark.parametrize("probes", [1, 2, 8])
@pytest.mark.parametrize("largest", [False, True])
def test_extremum_points_match_brute_force(probes, largest):
    check_extremum(largest, probes)


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, points=points_st)
def _check(largest, probes, rows, points):
    interner = Interner()
    logic = Extremum(interner, largest=largest)
    keys = np.arange(4, dtype=np.int64) + 100  # key ids; the kernel reads key indices
    points = sorted(points)
    pk = np.array([p[0] for p in points], dtype=np.int64)
    pa = np.array([p[1] for p in points], dtype=np.int64)
    ik = np.array([r[0] for r in rows], dtype=np.int64)
    vals = interner.ids(r[1] for r in rows)
    it = np.array([r[2] for r in rows], dtype=np.int64)
    diffs = np.array([r[3] for r in rows], dtype=np.int64)
    inp = Updates((keys.take(ik) if len(ik) else ik, vals), it.reshape(-1, 1), diffs)
    got_p, got_v, got_c = reduce_kernel.evaluate_points(pk, pa, keys, inp, ik, it, logic, probes)
    got = {int(p): interner.value(v) for p, v in zip(got_p.tolist(), got_v.tolist())}
    assert (got_c == 1).all()
    want = {i: brute(rows, p, largest) for i, p in enumerate(points)}
    assert got == {i: v for i, v in want.items() if v is not None}


def check_extremum(largest, probes):
    _check(largest, probes)
