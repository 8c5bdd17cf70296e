"""The README's engine example runs exactly as written (so it cannot go stale)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_engine_example_runs() -> None:
    text = README.read_text()
    section = text.split("## The engine in one example", 1)[1]
    block = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["probe"].at(9) == {0: 1}


def test_readme_workers_example_runs() -> None:
    text = README.read_text()
    section = text.split("### Several workers sharing one dataflow", 1)[1]
    block = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["reach"].at(100 - 1) == {(0, n): 1 for n in range(11)}
    assert sum(len(c.updates) for c in namespace["reach"].captures) == 11
