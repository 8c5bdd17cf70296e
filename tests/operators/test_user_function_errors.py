"""A user function that raises is named: operator kind, qualified name, file and line, record, time."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow
from ddflow.operators.errors import UserFunctionError

def parse(line):  # raises on anything but a string
    return tuple(line.split(","))


def _run(build, records):
    df = Dataflow()
    inp = df.new_input("x")
    build(inp.collection).capture()
    for t, r in records:
        inp.insert(r, t)
    inp.advance_to(100)
    df.run()


def _where(f) -> str:
    return f"{__file__}:{f.__code__.co_firstlineno}"


def test_map_names_function_record_and_time():
    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: c.map(parse), [(3, "a,b"), (5, ("bad",)), (7, "c,d")])
    err = info.value
    assert (err.operator, err.function, err.where, err.record, err.time) == ("map", "parse", _where(parse), ("bad",), 5)
    assert isinstance(err.__cause__, AttributeError)
    assert str(err) == (f"map function parse ({_where(parse)}) raised AttributeError: 'tuple' object has no "
                        "attribute 'split' on the record ('bad',) at time 5")


@pytest.mark.parametrize("op", ["filter", "flat_map", "inspect"])
def test_linear_operators_name_the_record(op):
    def picky(v):
        if v == 13:
            raise ValueError("thirteen")
        return [v] if op == "flat_map" else True

    f = picky if op != "inspect" else (lambda u: picky(u[0]))
    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: getattr(c, op)(f), [(1, 1), (2, 13), (4, 14)])
    err = info.value
    assert err.operator == op and err.time == 2 and isinstance(err.__cause__, ValueError)
    assert err.record == (13 if op != "inspect" else (13, 2, 1))
    assert err.function.endswith("picky" if op != "inspect" else "<lambda>")


def test_join_map_reduce_threshold_name_their_arguments():
    def joined(k, a, b):
        return k / (a - b)

    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: c.join_map(c, joined), [(1, (1, 5)), (1, (2, 7))])
    assert info.value.operator == "join_map" and info.value.function.endswith("joined")
    assert info.value.record in {(1, 5, 5), (2, 7, 7)} and isinstance(info.value.__cause__, ZeroDivisionError)

    def total(key, vals):
        if key == "boom":
            raise KeyError(key)
        return [(sum(v * c for v, c in vals), 1)]

    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: c.reduce(total), [(1, ("a", 1)), (1, ("boom", 2)), (1, ("boom", 3))])
    assert info.value.operator == "reduce" and info.value.record[0] == "boom"

    def keep(record, count):
        return 1 // (record - 2)

    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: c.threshold(keep), [(1, 1), (1, 2)])
    assert info.value.operator == "threshold" and info.value.record == (2, 1)


def test_a_callable_object_is_described_by_its_class():
    class Bad:
        def __call__(self, v):
            raise RuntimeError("no")

    with pytest.raises(UserFunctionError) as info:
        _run(lambda c: c.map(Bad()), [(1, 1)])
    assert info.value.function.endswith("Bad") and info.value.where.startswith(__file__)


def _quarantined(build, records, policy="dead_letter", functions=None, executor="nodes"):
    """Run with a quarantine: the final view and the failures taken."""
    from ddflow.operators.nodes.calls import Quarantine
    from ddflow.operators.tuning import EngineConfig

    df = Dataflow(config=EngineConfig(executor=executor))
    df.context.quarantine = Quarantine(policy, functions)
    inp = df.new_input("x")
    probe = build(inp.collection).capture()
    for t, r, d in records:
        inp.update(r, t, d)
    inp.advance_to(100)
    df.run()
    return probe.at(99), df.context.quarantine.drain()


def strict_int(v):
    return int(v) * 2


@pytest.mark.parametrize("executor", ["nodes", "plan"])
@pytest.mark.parametrize("op", ["map", "filter", "flat_map"])
def test_dead_letter_treats_the_record_as_absent_at_every_time(op, executor):
    f = {"map": strict_int, "filter": lambda v: int(v) > 1, "flat_map": lambda v: [int(v)] * 2}[op]
    poison = "x"
    records = [(1, "1", 1), (2, poison, 1), (3, "2", 1), (4, poison, -1), (5, poison, 1), (6, poison, 1),
               (7, "3", 1), (8, poison, -2), (9, "1", -1)]

    def build(c):
        return getattr(c, op)(f).map(lambda v: ("all", v)).count()

    view, failed = _quarantined(build, records, executor=executor)
    expected_df = Dataflow()  # the oracle: the same dataflow over the records without the poisoned one
    inp = expected_df.new_input("x")
    probe = build(inp.collection).capture()
    for t, r, d in records:
        if r != poison:
            inp.update(r, t, d)
    inp.advance_to(100)
    expected_df.run()
    assert view == probe.at(99)
    assert len(failed) == 1 and failed[0].record == poison and failed[0].operator == op and failed[0].time == 2
    assert isinstance(failed[0].__cause__, ValueError)


def test_stop_is_the_default_and_per_function_overrides_apply():
    records = [(1, "1", 1), (2, "x", 1)]
    with pytest.raises(UserFunctionError):
        _quarantined(lambda c: c.map(strict_int), records, policy="stop")
    with pytest.raises(UserFunctionError):
        _quarantined(lambda c: c.map(strict_int), records, functions={"strict_int": "stop"})
    _, failed = _quarantined(lambda c: c.map(strict_int), records, policy="stop",
                             functions={"strict_int": "dead_letter"})
    assert [e.record for e in failed] == ["x"]
    with pytest.raises(UserFunctionError):  # reductions always stop: a group without one value is no answer
        _quarantined(lambda c: c.map(lambda v: (v, 1)).reduce(lambda k, vs: [(int(k), 1)]), records)


@pytest.mark.parametrize("executor", ["nodes", "plan"])
def test_the_names_a_user_gave_operators_and_arrangements_are_in_the_message(executor):
    """`Collection.name` names the operator whose function raised; `Arranged.name` (or a named
    collection's ``name.by_key``) the arrangements a join or reduction reads; a node inside a loop
    is named, not the loop; an unnamed operator adds nothing."""
    from ddflow.operators.tuning import EngineConfig

    def run(build):
        df = Dataflow(config=EngineConfig(executor=executor))
        inp = df.new_input("x")
        build(inp.collection).capture()
        inp.insert((1, 2), 3)
        inp.advance_to(100)
        with pytest.raises(UserFunctionError) as info:
            df.run()
        return info.value

    def bad(*args):
        raise ValueError("no")

    err = run(lambda c: c.map(bad).name("parsed"))
    assert err.name == "parsed" and err.reading == ()
    assert str(err).startswith(f"map function {bad.__qualname__} ({_where(bad)}) in 'parsed' raised ValueError: no")
    err = run(lambda c: c.map(bad))
    assert err.name is None and " in '" not in str(err)
    err = run(lambda c: c.arrange_by_key().name("pairs").reduce(bad).name("totals"))
    assert (err.name, err.reading) == ("totals", ("pairs",))
    assert f"({_where(bad)}) in 'totals' reading 'pairs' raised ValueError" in str(err)
    err = run(lambda c: c.name("edges").join_map(c, bad))
    assert err.name is None and err.reading == ("edges.by_key",) and "reading 'edges.by_key' raised" in str(err)
    err = run(lambda c: c.iterate(lambda inner: inner.map(bad).name("step")).name("loop"))
    assert err.name == "step" and "in 'step' raised" in str(err)


def test_a_dead_lettered_failure_names_its_operator():
    _, failed = _quarantined(lambda c: c.map(strict_int).name("doubled"), [(1, "x", 1)])
    assert [e.name for e in failed] == ["doubled"] and "in 'doubled' raised ValueError" in str(failed[0])
    _, failed = _quarantined(lambda c: c.flat_map(lambda v: [int(v)]).name("ints"), [(1, "x", 1)])
    assert [e.name for e in failed] == ["ints"]


def test_repr_of_a_named_failure_shows_the_name():
    def bad(v):
        raise ValueError("no")

    df = Dataflow()
    inp = df.new_input("x")
    inp.collection.map(bad).name("parsed").capture()
    inp.insert(1, 0)
    inp.advance_to(1)
    with pytest.raises(UserFunctionError) as info:
        df.run()
    assert "in 'parsed'" in repr(info.value)
