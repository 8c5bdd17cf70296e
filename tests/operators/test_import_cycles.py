"""The engine has no import cycle, and imports nothing of the daemon or the configuration.

Every module of ``ddflow.operators`` is parsed (not imported) and each ``import``/``from ... import``
it holds, anywhere in the file (inside functions and ``if TYPE_CHECKING:`` blocks too), is an edge
to the engine module it names. A cycle among them fails the test with its modules in order.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "operators"
PACKAGE = "ddflow.operators"


def engine_modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the engine (a package by its ``__init__``)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([PACKAGE, *parts])] = path
    return out


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``ddflow`` modules ``name`` (at ``path``) imports: a name imported from a package counts
    as its submodule when there is one, else as the package."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m.startswith("ddflow.") and m != name}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its modules in order (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)) is not None:
                return found
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)) is not None:
            return found
    return None


def engine_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def test_the_engine_has_no_import_cycle() -> None:
    graph = engine_graph()
    assert len(graph) > 50  # the walk found the engine
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_the_engine_imports_no_other_ddflow_package() -> None:
    """The engine is the bottom layer: the configuration and the daemon import it, never the reverse."""
    outside = {(m, i) for m, deps in engine_graph().items() for i in deps if not i.startswith(PACKAGE)}
    assert not outside, sorted(outside)


def test_the_walk_sees_a_cycle(tmp_path: Path) -> None:
    """The check can fail: a cycle is found with its path, and an import under ``TYPE_CHECKING`` or
    inside a function is an edge."""
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
    hidden = tmp_path / "hidden.py"
    hidden.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .graph import Node\n"
                      "def f():\n    from ..config import x\n")
    assert imported(f"{PACKAGE}.hidden", hidden, {}) == {f"{PACKAGE}.graph", "ddflow.config"}
    modules = engine_modules()
    edges = imported(f"{PACKAGE}.values.sweep", modules[f"{PACKAGE}.values.sweep"], modules)
    assert f"{PACKAGE}.values.interner" in edges and f"{PACKAGE}.tuning" in edges
