"""Dataflows the daemon tests run (importable by worker subprocesses), and their in-process oracle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddflow.operators import Dataflow

INPUTS = ("a", "b")
OUTPUTS = ("joined", "counts", "echo_a", "echo_b")


def join_count(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """a(k, v) join b(k, w); per-key counts of a; and a, b themselves (to see assigned times)."""
    a, b = inputs["a"], inputs["b"]
    return {
        "joined": a.join(b),
        "counts": a.map(lambda r: r[0]).count(),
        "echo_a": a,
        "echo_b": b,
    }


def map_only(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {"out": inputs["a"].map(lambda r: (r[0], r[1] + 1))}


def oracle(flow: Any, updates: Mapping[str, Iterable[tuple[Any, int, int]]], names: Iterable[str]) -> dict[str, Any]:
    """Run ``flow`` in process over all ``updates`` (input -> (record, time, diff)); the captures."""
    df = Dataflow()
    sessions = {name: df.new_input(name) for name in names}
    outputs = flow(df, {n: s.collection for n, s in sessions.items()})
    captures = {name: c.capture() for name, c in outputs.items()}
    for name, ups in updates.items():
        for record, t, diff in ups:
            sessions[name].update(record, t, diff)
    for s in sessions.values():
        s.close()
    df.run()
    return captures


def gated(df: Any, inputs: Mapping[str, Any], *, gate: str) -> dict[str, Any]:
    """``a`` passed through a map that a test can hold: a record ``(-k, x)`` writes the file
    ``GATE/reached-k`` and then waits while ``GATE/hold`` exists (the worker loop is stuck there)."""
    import os
    import time

    def through(record: Any) -> Any:
        if record[0] < 0:
            open(os.path.join(gate, f"reached-{-record[0]}"), "w").close()
            while os.path.exists(os.path.join(gate, "hold")):
                time.sleep(0.02)
        return record

    return {"out": inputs["a"].map(through)}
