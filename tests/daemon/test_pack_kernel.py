"""pack_updates (columns into msgpack updates) against its reference, msgpack.packb: the same bytes
for every kind of column, every integer width and sign, floats of every class (infinities, NaN,
negative zero, subnormals), and records that are one plain value."""

from __future__ import annotations

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.daemon.formats.kernels.pack import BOOL, FLOAT, INT, max_packed_size, pack_updates, pack_updates_reference

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
EDGES = st.sampled_from([0, 1, -1, 31, 32, -32, -33, 127, 128, -128, -129, 255, 256, 65535, 65536, -32768, -32769,
                         2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1, 2**32, 2**63 - 1, -2**63])
INTS = st.one_of(I64, EDGES)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)


@st.composite
def batches(draw):
    k = draw(st.integers(1, 17))  # 16 and 17 take a 16-bit array header
    kinds = draw(st.lists(st.sampled_from([INT, FLOAT, BOOL]), min_size=k, max_size=k))
    scalar = k == 1 and draw(st.booleans())
    n = draw(st.integers(0, 12))
    values = np.empty((n, k), dtype=np.int64)
    for j, kind in enumerate(kinds):
        if kind == INT:
            column = draw(st.lists(INTS, min_size=n, max_size=n))
            values[:, j] = np.array(column, dtype=np.int64) if n else values[:, j]
        elif kind == FLOAT:
            column = np.array(draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=np.float64)
            values[:, j] = column.view(np.int64) if n else values[:, j]
        else:
            values[:, j] = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)) if n else values[:, j]
    times = np.array(draw(st.lists(INTS, min_size=n, max_size=n)), dtype=np.int64)
    diffs = np.array(draw(st.lists(INTS, min_size=n, max_size=n)), dtype=np.int64)
    return values, np.array(kinds, dtype=np.int64), scalar, times, diffs


@given(batches())
@settings(max_examples=400, deadline=None)
def test_the_kernel_writes_what_msgpack_writes(batch):
    values, kinds, scalar, times, diffs = batch
    out = np.empty(max_packed_size(len(times), values.shape[1]), dtype=np.uint8)
    written = pack_updates(values, kinds, scalar, times, diffs, out)
    expected = pack_updates_reference(values, kinds.tolist(), scalar, times, diffs)
    assert out[:written].tobytes() == expected


def test_framed_as_a_batch_it_reads_back_as_the_updates():
    values = np.array([[1, 2], [-300, 70000]], dtype=np.int64)
    times, diffs = np.array([5, 2**40], dtype=np.int64), np.array([1, -2], dtype=np.int64)
    out = np.empty(max_packed_size(2, 2), dtype=np.uint8)
    written = pack_updates(values, np.array([INT, INT], dtype=np.int64), False, times, diffs, out)
    framed = b"\x92" + out[:written].tobytes()
    assert msgpack.unpackb(framed) == [[[1, 2], 5, 1], [[-300, 70000], 2**40, -2]]
