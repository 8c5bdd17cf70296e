"""The scheduler steps only nodes with work (or a new frontier to observe), and stays exact."""

from __future__ import annotations

from ddflow.operators import Dataflow
from ddflow.operators.nodes import linear


def test_nodes_without_work_are_not_stepped(monkeypatch):
    steps = {"negate": 0}
    original = linear.Negate.step

    def counting(self, frontier):
        steps["negate"] += 1
        return original(self, frontier)

    monkeypatch.setattr(linear.Negate, "step", counting)
    df = Dataflow()
    xs = df.new_input("xs")
    passed = xs.collection.filter(lambda x: x % 10 == 0)
    for _ in range(50):
        passed = passed.negate()
    probe = passed.capture()
    for t in range(100):
        xs.insert(t, t)
        xs.advance_to(t + 1)
        df.run()
    # only the 10 records that pass the filter travel the chain: 10 epochs x 50 nodes
    assert steps["negate"] == 10 * 50
    assert probe.at(99) == {x: 1 for x in range(0, 100, 10)}
    assert not df.root.holding, "nothing is left holding work once every time is complete"


def test_work_held_at_incomplete_times_stays_scheduled():
    df = Dataflow()
    xs = df.new_input("xs")
    probe = xs.collection.map(lambda x: x % 2).count().capture()
    xs.insert(1, 5)
    xs.insert(2, 9)
    xs.advance_to(6)
    df.run()
    assert probe.at(5) == {(1, 1): 1}
    assert df.root.holding, "the update at 9 is still held"
    xs.advance_to(10)
    df.run()
    assert probe.at(9) == {(1, 1): 1, (0, 1): 1}
    assert not df.root.holding
