"""A sliding window keeps the trace bounded: compaction by the frontier cancels what left the window.

Step ``j`` (0 <= j < 1,000,000) inserts record ``j % 1000`` at time ``j`` and retracts the record
inserted ``WINDOW`` steps earlier, so 1,000,000 insert/retract pairs cycle through 1,000 distinct
records with ``WINDOW`` of them live at any time. Batches of 1,000 updates (500 steps) go into a
spine whose readers advance their frontiers as the upper moves. The number of records the trace holds
must stay below a fixed multiple of what its readers can still tell apart, and the number of batches
below a logarithmic bound, for the whole run (record counts, never times).
"""

from __future__ import annotations

import math

import numpy as np

from ddflow.operators.frontier import Antichain
from ddflow.operators.traces.batch import Updates
from ddflow.operators.traces.spine import Spine

PAIRS, RECORDS, WINDOW, STEPS_PER_BATCH = 1_000_000, 1_000, 500, 500
BATCH = 2 * STEPS_PER_BATCH  # updates per inserted batch: 500 inserts and 500 retractions


def step_batch(b: int) -> Updates:
    """Batch ``b``: steps ``[500 b, 500 b + 500)``, records keyed by ``record // 10``."""
    j = np.arange(b * STEPS_PER_BATCH, (b + 1) * STEPS_PER_BATCH, dtype=np.int64)
    old = j[j >= WINDOW]
    records = np.concatenate([j % RECORDS, (old - WINDOW) % RECORDS])
    times = np.concatenate([j, old]).reshape(-1, 1)
    diffs = np.concatenate([np.ones(len(j), dtype=np.int64), -np.ones(len(old), dtype=np.int64)])
    return Updates((records // 10, records), times, diffs)


def window_at(upper: int) -> dict[tuple[int, int], int]:
    """The live records just before ``upper``: those inserted in the last ``WINDOW`` steps."""
    return {(r // 10, r): 1 for r in (np.arange(max(0, upper - WINDOW), upper) % RECORDS).tolist()}


def accumulated(trace: Spine) -> dict[tuple[int, int], int]:
    c = trace.contents()
    acc: dict[tuple[int, int], int] = {}
    for k, v, diff in zip(c.data[0].tolist(), c.data[1].tolist(), c.diffs.tolist(), strict=True):
        acc[(k, v)] = acc.get((k, v), 0) + diff
    return {kv: n for kv, n in acc.items() if n}


def run(lag_batches: int) -> tuple[int, int]:
    """Run the whole window with one reader at the frontier and one ``lag_batches`` behind it."""
    trace = Spine(1, "window")
    current, lagging = trace.handle(), trace.handle()
    peak_records = peak_batches = 0
    for b in range(PAIRS // STEPS_PER_BATCH):
        upper = (b + 1) * STEPS_PER_BATCH
        trace.insert(step_batch(b), Antichain([upper]))
        current.set_logical_compaction(Antichain([upper]))
        current.set_physical_compaction(Antichain([upper]))
        behind = Antichain([max(upper - lag_batches * STEPS_PER_BATCH, 0)])
        if lagging.logical != behind:
            lagging.set_logical_compaction(behind)
            lagging.set_physical_compaction(behind)
        stats = trace.stats()
        peak_records, peak_batches = max(peak_records, stats["records"]), max(peak_batches, stats["batches"])
        if b % 250 == 0 or b == PAIRS // STEPS_PER_BATCH - 1:
            assert accumulated(trace) == window_at(upper), f"window content wrong after batch {b}"
    assert trace.stats()["merge_work"] > 2 * PAIRS, "compaction happened by merging"
    return peak_records, peak_batches


def test_sliding_window_trace_stays_bounded():
    peak_records, peak_batches = run(lag_batches=0)
    # what a reader at the frontier can tell apart: the live window plus the batch in flight
    assert peak_records <= 4 * (WINDOW + BATCH), peak_records
    assert peak_batches <= math.log2(2 * PAIRS), peak_batches


def test_sliding_window_with_a_lagging_reader_stays_bounded():
    lag = 4
    peak_records, peak_batches = run(lag_batches=lag)
    # the lagging reader still needs the last `lag` batches' times told apart
    assert peak_records <= 2 * (WINDOW + (lag + 1) * BATCH), peak_records
    assert peak_batches <= math.log2(2 * PAIRS), peak_batches
