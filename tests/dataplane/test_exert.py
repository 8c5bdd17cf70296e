"""A trace's idle merge after an epoch (``Spine.exert``) of a large epoch's batches: a loop's rounds
leave a few dozen batches of very different sizes (a wave that grows, then ebbs); they become one
batch, merged pair by pair, smallest adjacent pair first, so each update is read a few times (a
cascade from the newest backwards read what it had merged again at every older batch)."""

from __future__ import annotations

import math

import numpy as np

from ddflow.operators.frontier import Antichain
from ddflow.operators.traces.batch import Updates
from ddflow.operators.traces.spine import Spine

WAVE = [10 * 2**i for i in range(11)] + [10 * 2**i for i in range(9, -1, -1)]  # 21 rounds, 10 .. 10,240 keys


def _rounds(sizes: list[int], retract: bool = False) -> Spine:
    """A depth-2 trace given one batch per loop round ``k`` at time ``(0, k)`` (keys ``0..size-1``;
    with ``retract``, each round at an odd ``k`` retracting its keys), then closed at ``(1, 0)``. A
    reader holds the epoch's times apart until it closes (as a loop's readers do: no batch of the
    epoch merges inside it), then compacts to ``(1, 0)``."""
    trace = Spine(2)
    reader = trace.handle()
    for k, n in enumerate(sizes):
        keys = np.arange(n, dtype=np.int64)
        diffs = np.full(n, -1 if retract and k % 2 else 1, dtype=np.int64)
        upper = Antichain([(0, k + 1), (1, 0)]) if k + 1 < len(sizes) else Antichain([(1, 0)])
        trace.insert(Updates((keys, keys), np.tile(np.array([0, k], dtype=np.int64), (n, 1)), diffs), upper)
    reader.set_compaction(Antichain([(1, 0)]))
    return trace


def _accumulation(trace: Spine, at: tuple[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    c = trace.contents()
    for k, t, d in zip(c.data[0].tolist(), c.times.tolist(), c.diffs.tolist()):
        if t[0] <= at[0] and t[1] <= at[1]:
            out[k] = out.get(k, 0) + d
    return {k: d for k, d in out.items() if d}


def test_an_epochs_round_batches_become_one_reading_each_update_a_few_times():
    trace = _rounds(WAVE)
    before, records = trace.stats(), len(trace)
    assert before["batches"] == len(WAVE)  # inside the epoch none is sealed: none merged
    want = {k: _accumulation(trace, (1, k)) for k in (0, 5, 12, 20)}
    trace.exert()
    after = trace.stats()
    assert after["batches"] == 1
    assert after["merge_work"] - before["merge_work"] <= math.ceil(math.log2(len(WAVE))) * records
    assert {k: _accumulation(trace, (1, k)) for k in (0, 5, 12, 20)} == want


def test_retractions_across_rounds_keep_their_accumulations():
    trace = _rounds(WAVE, retract=True)
    want = {k: _accumulation(trace, (1, k)) for k in range(len(WAVE))}
    trace.exert()
    assert trace.stats()["batches"] == 1
    assert {k: _accumulation(trace, (1, k)) for k in range(len(WAVE))} == want
