"""What docs/dataflows.md says a dataflow receives holds: every input delivers tuples of its declared
fields in their order, 1-tuples for one field, in every format and on the compiled (typed) decoding
path as on the general one; an input without fields delivers any array as a tuple."""

from __future__ import annotations

from typing import Any

import pytest

from ddflow.daemon import EpochPolicy, InputSpec, Worker
from ddflow.daemon.testing import ListSink, ReplaySource
from support.docs import example


def test_record_shapes_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    code = example("record-shapes", "python")
    exec(compile(code, "docs/dataflows.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    assert printed == code.rsplit("# ", 1)[1].strip() == "{('/home',): 1} {(7, '/home'): 1}"


def delivered(spec: InputSpec, messages: list[bytes] | None, updates: list[tuple[Any, int, int]] | None) -> list[Any]:
    """The records the dataflow function's input collection holds after the messages (or updates)."""
    seen: list[Any] = []
    sink = ListSink(["out"])
    source = ReplaySource([spec], dead_letters=sink.dead_letters)
    if updates is not None:
        source.send_updates(spec.name, updates)
        source.advance_to(spec.name, 10)
    for message in messages or ():
        source.send(spec.name, message)
    worker = Worker(lambda df, inputs: {"out": inputs[spec.name].inspect(lambda u: seen.append(u[0]))},
                    source, sink, epochs=EpochPolicy(resolution_ns=10))
    worker.run(until=10, timeout=30)
    assert not sink.dead, [d.reason for d in sink.dead]
    return seen


@pytest.mark.parametrize("fields, data", [
    (["page"], ("/home",)),                              # one field, general decoding
    ({"n": "int"}, (3,)),                                # one typed field: the compiled column path
    ({"n": "int", "m": "int"}, (3, 4)),
    (["user", "page"], (7, "/home")),
])
def test_msgpack_inputs_deliver_tuples_of_their_fields(fields: Any, data: tuple) -> None:
    assert delivered(InputSpec("v", "v", fields=fields), None, [(data, 5, 1)]) == [data]


def test_an_input_without_fields_delivers_any_array_as_a_tuple() -> None:
    records = delivered(InputSpec("v", "v"), None, [(["/home"], 5, 1), ([1, [2, 3]], 6, 1)])
    assert sorted(records, key=repr) == [("/home",), (1, (2, 3))]


def test_json_and_debezium_inputs_deliver_1_tuples_for_one_field() -> None:
    json_spec = InputSpec("v", "v", fields=["page"], format="json")
    assert delivered(json_spec, [b'{"page": "/home", "time": 5, "diff": 1}', b'{"progress": 10}'], None) == [("/home",)]
    debezium = InputSpec("v", "v", fields=["page"], format="debezium", policy="monotonic")
    events = [b'{"before": null, "after": {"page": "/home", "title": "Home"}, "op": "c", "ts_ns": 5}',
              b'{"before": null, "after": {"page": "/late", "title": "Late"}, "op": "c", "ts_ns": 20}']
    records = delivered(debezium, events, None)
    assert ("/home",) in records and all(type(r) is tuple and len(r) == 1 for r in records), records
