"""The dataflow the backfill tests run, its in-process oracle, and seeded histories."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from ddflow.operators import Dataflow

INPUTS = ("a", "b")
OUTPUTS = ("counts", "matched")


def counts_matched(df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Per-key counts of a, and the b records whose key a holds."""
    a, b = inputs["a"], inputs["b"]
    keys = a.map(lambda r: r[0])
    return {"counts": keys.count(), "matched": b.semijoin(keys.distinct())}


def oracle(updates: Mapping[str, Iterable[tuple[Any, int, int]]]) -> dict[str, Any]:
    df = Dataflow()
    sessions = {name: df.new_input(name) for name in INPUTS}
    outputs = counts_matched(df, {n: s.collection for n, s in sessions.items()})
    captures = {name: c.capture() for name, c in outputs.items()}
    for name, ups in updates.items():
        records, times, diffs = zip(*ups, strict=True) if ups else ((), (), ())
        sessions[name].update_many(records, times, diffs)
    for s in sessions.values():
        s.close()
    df.run()
    return captures


def history(seed: int, count: int, frontier: int, *, keys: int = 20_000) -> dict[str, list[tuple[Any, int, int]]]:
    """``count`` updates split over a and b at times in [0, frontier): inserts, and removals of
    records inserted earlier (so consolidation has work to do)."""
    rng = random.Random(seed)
    out: dict[str, list[tuple[Any, int, int]]] = {name: [] for name in INPUTS}
    live: dict[str, list[Any]] = {name: [] for name in INPUTS}
    for _ in range(count):
        name = "a" if rng.random() < 0.7 else "b"
        t = rng.randrange(frontier)
        if live[name] and rng.random() < 0.25:
            record = live[name].pop(rng.randrange(len(live[name])))
            out[name].append((record, t, -1))
        else:
            record = (rng.randrange(keys), rng.randrange(10 if name == "a" else 5))
            live[name].append(record)
            out[name].append((record, t, rng.choice([1, 1, 2])))
    return out


def tail(seed: int, frontier: int, steps: int, step: int, per_step: int, *, keys: int = 20_000) -> dict[str, list]:
    """Live updates at times in [frontier, frontier + steps * step)."""
    rng = random.Random(seed)
    out: dict[str, list[tuple[Any, int, int]]] = {name: [] for name in INPUTS}
    for s in range(steps):
        for _ in range(per_step):
            name = rng.choice(INPUTS)
            record = (rng.randrange(keys), rng.randrange(10 if name == "a" else 5))
            out[name].append((record, frontier + s * step + rng.randrange(step), rng.choice([1, -1, 1])))
    for ups in out.values():
        ups.sort(key=lambda u: u[1])
    return out
