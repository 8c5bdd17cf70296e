"""The packages' import structure, read from the source (AST, every import, at any depth):
no modules import each other in a cycle, and the daemon's layers (`ddflow.daemon`'s docstring)
import only downwards.

A package is checked by adding it to `PACKAGES` (the engine's own, stricter check that it imports
no other ddflow package is ``tests/operators/test_import_cycles.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"ddflow.daemon": REPO / "daemon", "ddflow.config": REPO / "config", "ddflow.operators": REPO / "operators"}

# ddflow.daemon's layers, from the bottom: a module may import from its own layer and those below.
# A module's layer is that of the longest name listed that is it or a package holding it.
DAEMON_LAYERS: list[tuple[str, ...]] = [
    ("exceptions", "block", "durable"),
    ("formats",),
    ("observe",),
    ("kafka",),
    ("deadletter",),
    ("io",),
    ("input",),
    ("output",),
    ("state",),
    ("worker", "epochs"),
    ("cluster",),
    ("factory",),
    ("service",),
    ("testing",),
    ("cli",),
]


def modules(package: str, root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package``: name -> (file, whether it is a package's ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join([package, *parts])] = (path, is_package)
    return found


def imports(name: str, path: Path, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, wherever the import statement is
    (`from p import m` names module ``p.m`` when it is one, else ``p``)."""
    here = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph(package: str, root: Path) -> dict[str, set[str]]:
    found = modules(package, root)
    return {name: imports(name, path, is_package, set(found)) for name, (path, is_package) in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(name: str, package: str, layers: list[tuple[str, ...]]) -> int | None:
    """The layer of module ``name`` (None: the package's own ``__init__``, which loads its public
    names lazily and is not layered)."""
    rest = name[len(package) + 1 :] if name != package else ""
    best = None
    for rank, members in enumerate(layers):
        for member in members:
            if (rest == member or rest.startswith(member + ".")) and (best is None or len(member) > len(best[1])):
                best = (rank, member)
    if rest and best is None:
        raise AssertionError(f"{name} is in no layer of {package}: add it to the layers and to the package docstring")
    return None if best is None else best[0]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycles(package: str) -> None:
    assert cycles(import_graph(package, PACKAGES[package])) == []


def test_daemon_imports_only_downwards() -> None:
    graph = import_graph("ddflow.daemon", PACKAGES["ddflow.daemon"])
    upward = []
    for name, targets in graph.items():
        mine = layer(name, "ddflow.daemon", DAEMON_LAYERS)
        for target in targets:
            theirs = layer(target, "ddflow.daemon", DAEMON_LAYERS)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{name} -> {target}")
    assert sorted(upward) == []


def test_the_daemon_root_loads_nothing_at_import() -> None:
    """The root ``__init__`` imports its public names on first use only (`ddflow --help` stays light)."""
    graph = import_graph("ddflow.daemon", PACKAGES["ddflow.daemon"])
    assert graph["ddflow.daemon"] == set()


def test_the_checks_find_a_cycle_and_an_upward_import() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    layers = [("a",), ("b", "c"), ("d",)]
    assert [layer(n, "p", layers) for n in ("p.a", "p.b", "p.c", "p.d")] == [0, 1, 1, 2]
    with pytest.raises(AssertionError, match="in no layer"):
        layer("p.e", "p", layers)
