"""Reductions over more keys than the kernel evaluates at once run in key chunks; the chunked result
equals the unchunked one (a chunk size of a few keys forces many chunks)."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.tuning import EngineConfig


def run(updates, config=None):
    df = Dataflow(config=config)
    session = df.new_input("xs")
    probe_count = session.collection.map(lambda x: (x % 7, x)).count().capture()
    probe_min = session.collection.map(lambda x: (x % 5, x)).min().capture()
    probe_reach = session.collection.iterate(lambda v: v.map(lambda x: x // 2).concat(v).distinct()).capture()
    for epoch, batch in enumerate(updates):
        for x, diff in batch:
            session.update(x, epoch, diff)
        session.advance_to(epoch + 1)
        df.run()
    return [sorted(map(repr, p.updates)) for p in (probe_count, probe_min, probe_reach)]


@pytest.mark.parametrize("chunk", [1, 3])
def test_chunked_reduce_equals_unchunked(chunk):
    updates = [[(x, 1) for x in range(40)], [(x, -1) for x in range(0, 40, 3)] + [(x, 2) for x in range(40, 50)],
               [(x, 1) for x in range(0, 40, 3)]]
    want = run(updates)
    assert run(updates, EngineConfig(reduce_chunk_keys=chunk)) == want
