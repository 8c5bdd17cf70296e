"""Ids given back after every run, with the results still right at every complete time.

Every pipeline of ``test_oracle_random`` runs with a sweep at the end of every ``df.run()``
(``sweep_growth=1, sweep_min_ids=1``): ids no state holds any more are reclaimed and handed to new
records at once, so an id column some node kept without reporting it (``Node.held_ids``), or a cache
keyed by ids that was not cleared, would name another record and show up as a wrong answer.
"""

from __future__ import annotations

import pytest
from oracle_harness import check_pipeline
from test_oracle_random import GRAPHS, PIPELINES, _sources

from ddflow.operators.tuning import EngineConfig

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

EVERY_RUN = EngineConfig(sweep_growth=1, sweep_min_ids=1)


@pytest.mark.slow  # the quick run keeps the composites' sweeps and the reuse check below
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_operator_with_ids_reclaimed_after_every_run(name):
    records, count, pipeline = PIPELINES[name]
    df = check_pipeline(pipeline, _sources(1, 1_700_000_000_000_000_000, records, count, epochs=12, per_epoch=30),
                        config=EVERY_RUN)
    assert df.interner.sweeps >= 12


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_composite_with_ids_reclaimed_after_every_run(name):
    records, count, pipeline = GRAPHS[name]
    df = check_pipeline(pipeline, _sources(2, 0, records, count, epochs=8, per_epoch=20), config=EVERY_RUN)
    assert df.interner.sweeps >= 8


def test_sweeps_reclaim_and_reuse_ids():
    """The pipelines above do give ids back (so the checks above exercise reuse)."""
    records, count, pipeline = PIPELINES["join_distinct_count"]
    df = check_pipeline(pipeline, _sources(0, 0, records, count, epochs=12, per_epoch=30), config=EVERY_RUN)
    assert df.interner.reclaimed > 50
    assert df.interner.stats()["id_bound"] < df.interner.reclaimed
