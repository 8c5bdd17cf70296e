"""Outputs as columns: an epoch whose records are ints or tuples of ints leaves the engine as
columns (`Capture.drain_columns`) and the msgpack format partitions and encodes it without a
Python object per update; what it writes is byte for byte what the row path writes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ddflow.daemon.block import Block
from ddflow.daemon.formats.result_protocol import MsgpackEncoder
from ddflow.daemon.formats.result_protocol import record_partition
from ddflow.operators import Dataflow

I64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def blocks(draw):
    n = draw(st.integers(0, 30))
    width = draw(st.sampled_from([None, 1, 2, 3]))  # None: records that are plain ints
    shape = (n,) if width is None else (n, width)
    values = np.array(draw(st.lists(I64, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                      dtype=np.int64).reshape(shape)
    times = np.array(draw(st.lists(I64, min_size=n, max_size=n)), dtype=np.int64)
    diffs = np.array(draw(st.lists(I64.filter(bool), min_size=n, max_size=n)), dtype=np.int64)
    return Block(values, times, diffs)


@given(blocks(), st.integers(1, 7), st.integers(1, 12))
@settings(max_examples=200, deadline=None)
def test_columns_are_partitioned_and_encoded_as_their_rows_are(block, partitions, batch):
    encoder = MsgpackEncoder("out", "t", max_batch_updates=batch)
    rows = block.rows()
    assert encoder.partitions(block, partitions).tolist() == [record_partition(r, partitions) for r, _, _ in rows]
    for writer in (None, (1, 3)):
        assert encoder.epoch_block(5, 10, "inc", 0, block, writer) == encoder.epoch(5, 10, "inc", 0, rows, writer)


def test_the_engine_drains_int_records_as_columns_and_others_as_values():
    df = Dataflow()
    a = df.new_input("a")
    pairs = a.collection.map(lambda r: (r[0], r[1] * 2)).capture(history=False)
    ints = a.collection.map(lambda r: r[0]).capture(history=False)
    names = a.collection.map(lambda r: f"n{r[0]}").capture(history=False)
    a.update_many([(1, 2), (3, 4), (1, 2)], [5, 6, 7], [1, 1, -1])
    a.advance_to(10)
    df.run()
    records, times, diffs = pairs.drain_columns()
    assert isinstance(records, np.ndarray) and records.shape == (3, 2)
    assert sorted(Block(records, times, diffs).rows()) == [((1, 4), 5, 1), ((1, 4), 7, -1), ((3, 8), 6, 1)]
    records, times, diffs = ints.drain_columns()
    assert records.ndim == 1 and sorted(Block(records, times, diffs).rows()) == [(1, 5, 1), (1, 7, -1), (3, 6, 1)]
    records, times, diffs = names.drain_columns()
    assert isinstance(records, list) and sorted(zip(records, times.tolist(), diffs.tolist())) == [
        ("n1", 5, 1), ("n1", 7, -1), ("n3", 6, 1)]
    assert pairs.drain_columns()[1].tolist() == []  # drained: nothing twice
