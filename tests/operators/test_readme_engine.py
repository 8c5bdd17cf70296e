"""The engine examples of the README and of docs/dataflows.md run exactly as written (so they cannot go stale)."""

from __future__ import annotations

from support.docs import example


def run(code: str) -> dict:
    namespace: dict = {}
    exec(compile(code, "docs example", "exec"), namespace)
    return namespace


def test_engine_example_runs() -> None:
    assert run(example("engine", "python"))["probe"].at(9) == {0: 1}


def test_readme_engine_example_is_the_guide_s_and_runs() -> None:
    assert example("readme-engine") == example("engine")
    assert run(example("readme-engine", "python"))["probe"].at(7) == {0: 1, 1: 1, 2: 1}


def test_workers_example_runs() -> None:
    namespace = run(example("workers", "python"))
    assert namespace["reach"].at(100 - 1) == {(0, n): 1 for n in range(11)}
    assert sum(len(c.updates) for c in namespace["reach"].captures) == 11
