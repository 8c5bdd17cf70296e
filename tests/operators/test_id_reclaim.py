"""Ids are given back when no state holds their record, and stay within their limit.

Counts, never times: the interner's ids in use and table sizes stay bounded on a window of live
records sliding over ever new ones; reclaimed ids are reused; running out raises ``IdLimitError``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ddflow.operators import Dataflow, DataflowError
from ddflow.operators.tuning import EngineConfig
from ddflow.operators.errors import IdLimitError
from ddflow.operators.values.interner import Interner


def _reclaim(interner: Interner, *held: np.ndarray) -> int:
    marks = interner.marks()
    for column in held:
        interner.mark(column, marks)
    return interner.reclaim(marks)


def test_reclaim_keeps_held_records_with_their_parts_and_reuses_the_rest():
    interner = Interner()
    unit = interner.id(())
    kept = interner.ids([(1, ("a", 2.5)), (3, 4)])
    interner.ids([(5, 6), "b", 7.5, (8, (9, "c"))])
    before = interner.value_list(kept)
    # (5, 6), 5, 6, "b", 7.5, (8, (9, "c")), 8, (9, "c"), 9 and "c" are held by nothing
    assert _reclaim(interner, kept) == 10
    assert interner.value_list(kept) == before and interner.value(unit) == ()
    # 1, "a", 2.5, ("a", 2.5), the pair, 3, 4, (3, 4), () are in use
    assert len(interner) == 9
    again = interner.ids([("new", 1), "x", 3, ("a", 2.5)])
    assert again[2] == interner.ids([3])[0] and interner.value_list(again) == [("new", 1), "x", 3, ("a", 2.5)]
    assert again.max() < 9 + 4 + 2  # freed ids were handed out again, lowest first
    assert interner.split(kept, "step")[0].tolist() == interner.ids([1, 3]).tolist()


def test_a_sweep_that_finds_every_id_held_gives_nothing_back_and_keeps_the_caches():
    """Every id in use marked: nothing swept, a cache keyed by ids is not cleared; one id unmarked: it is
    given back and the cache cleared."""

    class Cache:
        cleared = 0

        def clear(self) -> None:
            self.cleared += 1

    interner = Interner()
    cache = interner.cache(Cache())
    held = interner.ids([(1, "a"), 2, "b"])
    assert _reclaim(interner, held) == 0
    assert cache.cleared == 0 and interner.sweeps == 1 and interner.live_after_sweep == len(interner) == 5
    assert _reclaim(interner, held[:2]) == 1  # "b" given back
    assert cache.cleared == 1 and len(interner) == 4 and interner.value_list(held[:2]) == [(1, "a"), 2]


def test_aliases_and_objects_are_forgotten_with_their_ids():
    interner = Interner()
    one, true = interner.ids([1, True]).tolist()
    assert one == true
    _reclaim(interner)
    assert len(interner) == 0 and interner.stats()["objects"] == 0
    t = interner.id(True)  # True first now: it holds the id of every value equal to it
    assert interner.ids([1, 1.0]).tolist() == [t, t] and interner.value(t) is True
    keep = interner.ids([(True, "s")])
    _reclaim(interner, keep)
    assert interner.value_list(keep) == [(True, "s")] and interner.id(1) == t


def test_running_out_of_ids_raises_a_dataflow_error_and_reclaiming_makes_room():
    interner = Interner(id_limit=1_000)
    first = interner.int_ids(np.arange(900))
    with pytest.raises(IdLimitError, match="out of record ids") as err:
        interner.int_ids(np.arange(900, 1_200))
    assert isinstance(err.value, DataflowError)
    _reclaim(interner, first[:100])
    more = interner.ids([(i, i) for i in range(400)])  # 300 new ints and 400 pairs, in freed ids
    assert more.max() < 1_000 and interner.value_list(more[-3:]) == [(397, 397), (398, 398), (399, 399)]
    assert interner.value_list(first[:100]) == list(range(100))


def _sliding_window(window: int, distinct: int, epoch: int, config: EngineConfig, interner: Interner | None = None):
    """Record ``k`` enters at time ``k`` and leaves at ``k + window``; per epoch, the interner's stats.
    The dataflow keys records by ``k % 97``, counts them per key and joins the counts back."""
    df = Dataflow(config=config)
    if interner is not None:
        df.context.interner = interner  # before the graph is built: every node uses it
    records = df.new_input("records")
    keyed = records.collection.map(lambda k: (k % 97, k))
    counts = keyed.map(lambda kv: kv[0]).count()
    out = keyed.join_map(counts, lambda key, k, n: (k, n)).capture(history=False)
    stats, live = [], Counter()
    for lo in range(0, distinct, epoch):
        new = np.arange(lo, lo + epoch, dtype=np.int64)
        old = new - window
        old = old[old >= 0]
        records.update_many(np.concatenate([new, old]), np.concatenate([new, old + window]),
                            np.concatenate([np.ones(len(new), dtype=np.int64), -np.ones(len(old), dtype=np.int64)]))
        records.advance_to(lo + epoch)
        df.run()
        for (k, n), _t, d in out.drain():
            live[(k, n)] += d
        stats.append(df.interner.stats())
    return stats, +live


@pytest.mark.slow  # 200,000 distinct records (the full suite runs it)
def test_interner_stays_bounded_on_a_window_sliding_over_distinct_records():
    """1,000 live records over 200,000 distinct ones: the ids in use, the id range and the hash
    tables stay within a small factor of their size after the first 10,000 records (without
    reclaiming, every one of the ~3 ids per record ever seen would stay; pairs that travel between
    operators as two id columns take none)."""
    window, distinct, epoch = 1_000, 200_000, 1_000
    stats, live = _sliding_window(window, distinct, epoch, EngineConfig(sweep_min_ids=4_096))
    early = stats[10 - 1]
    worst = {name: max(s[name] for s in stats[10:]) for name in ("ids", "id_bound", "int_capacity", "pair_capacity")}
    print(f"after 10,000 records {early}; worst later {worst}; final {stats[-1]}")
    assert stats[-1]["reclaimed"] > 2 * distinct
    for name, value in worst.items():
        assert value <= 3 * max(early[name], 4_096 * 2), (name, value, early[name])
    # the output is still right: the last window's records with their key's count
    last = range(distinct - window, distinct)
    per_key = Counter(k % 97 for k in last)
    assert live == {(k, per_key[k % 97]): 1 for k in last}


def test_without_reclaiming_the_same_window_runs_out_of_ids():
    config = EngineConfig(sweep_min_ids=1 << 30)
    with pytest.raises(IdLimitError):
        _sliding_window(200, 20_000, 500, config, Interner(id_limit=30_000))
    stats, live = _sliding_window(200, 20_000, 500, EngineConfig(sweep_min_ids=1_000), Interner(id_limit=30_000))
    assert stats[-1]["id_bound"] < 30_000 and len(live) == 200
