"""Reductions over many distinct times in one epoch stay linear in the updates.

A count of a count over 100,000 updates, each at its own nanosecond time, changes its output at
almost every time with a different output value each time; the kernel's residual must be sparse
(a dense (outputs x times) table would need tens of GB and used to fail with MemoryError).
"""

from __future__ import annotations

from collections import Counter

from ddflow.operators import Dataflow


def test_count_of_count_at_100k_distinct_times() -> None:
    n, keys = 100_000, 25_000
    df = Dataflow()
    records = df.new_input("records")
    histogram = records.collection.count().map(lambda r: r[1]).count()
    probe = histogram.capture()
    records.update_many([k % keys for k in range(n)], list(range(n)), [1] * n)
    records.advance_to(n)
    df.run()
    for t in (0, keys - 1, keys, n // 2 + 7, n - 1):
        per_key = Counter(k % keys for k in range(t + 1))
        assert probe.at(t) == {(c, m): 1 for c, m in Counter(per_key.values()).items()}
    assert sum(1 for _ in probe.updates) <= 4 * n
