"""A reduction's round reads the change, not the key's history: rows counted, never timed.

A compiled round reads each candidate key's input and output history: looked up in the traces the
first time (``rows_read``), and afterwards from the rows the reduction kept of it between rounds
(``rows_kept``, condensed: one row per val and time a later round can tell apart) plus the round's
new input rows (``rows_new``). By default a reduction starts keeping histories from a round of 256
keys (fewer are looked up as cheaply); these tests keep them from one key on, and check that the
default does not keep them for small rounds.
"""

from __future__ import annotations

from ddflow.operators import Dataflow
from ddflow.operators.nodes.reduce.node import Reduce
from ddflow.operators.tuning import EngineConfig

EVERY_ROUND = EngineConfig(reduce_history_keys=1)  # keep histories from rounds of one key on


def _reduce(df) -> Reduce:
    (node,) = [n for n in df._all_nodes() if isinstance(n, Reduce)]
    return node


def _reads(node: Reduce) -> int:
    return node.rows_read + node.rows_kept + node.rows_new


def test_a_change_after_a_long_history_reads_the_change():
    """A key summed over 2,000 epochs, one update each at its own time on one of three vals: the
    round after one more change reads its three vals, its one output and the change, from what the
    reduction kept, and nothing from the traces (whose lookup reads the key's rows in every batch of
    the spine)."""
    df = Dataflow(config=EVERY_ROUND)
    xs = df.new_input("xs")
    probe = xs.collection.sum().capture()
    node = _reduce(df)
    n = 2000
    for t in range(n):
        xs.insert((0, t % 3), t)
        xs.advance_to(t + 1)
        df.run()
    read, before = node.rows_read, _reads(node)
    xs.insert((0, 1), n)
    xs.advance_to(n + 1)
    df.run()
    assert probe.at(n) == {(0, sum(t % 3 for t in range(n)) + 1): 1}
    assert node.rows_read == read  # nothing looked up in the traces
    assert _reads(node) - before <= 5  # 3 vals + 1 output + 1 new row (the history is 2,000 updates)


def test_rounds_of_a_loop_read_what_changed():
    """Inside a loop, a key whose output moves in each of 60 rounds of one epoch: the rows written in
    earlier rounds collapse into one per val and outer time, so each round reads a few rows (read
    again every round, they would be ~4 per round before it: ~7,000 over the epoch)."""
    rounds = 60
    df = Dataflow(config=EVERY_ROUND)
    xs = df.new_input("xs")
    seed = xs.collection
    probe = seed.iterate(lambda v: v.map(lambda kv: (kv[0], min(kv[1] + 1, rounds))).concat(seed).max()).capture()
    node = _reduce(df)
    xs.insert((0, 0), 0)
    xs.advance_to(1)
    df.run()
    assert probe.at(0) == {(0, rounds): 1}
    assert node.rounds_compiled >= rounds
    assert node.rows_read <= 8  # the key's traces read in its first round only (empty then)
    assert _reads(node) <= 8 * rounds


def test_small_rounds_look_keys_up():
    """By default a round of a few keys starts no history: the traces are read, nothing is kept."""
    df = Dataflow()
    xs = df.new_input("xs")
    xs.collection.sum().capture()
    node = _reduce(df)
    for t in range(20):
        xs.insert((0, t % 3), t)
        xs.advance_to(t + 1)
        df.run()
    assert node.history.count == 0 and node.rows_kept == 0 and node.rows_read > 0
