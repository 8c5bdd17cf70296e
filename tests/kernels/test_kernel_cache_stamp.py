"""The on-disk kernel cache is stamped with the text of the whole kernel tree: a kernel whose helper
changed in another module is compiled again, not loaded with the helper's old code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from ddflow.operators.kernels import ENGINE_TREE, TOOLING, sources_stamp

# a kernel tree of three modules: the kernel, a helper without a cache of its own (inlined by numba
# into the kernel's code) and a cached helper inlined at the IR level, each in its own module
PACKAGE = {
    "__init__.py": """
        from ddflow.operators.kernels import helper, kernel_tree, registered_kernel

        kernel_tree(__file__)
        KERNELS = {}
    """,
    "scale.py": """
        from . import helper

        FACTOR = 2


        @helper
        def scale(x):
            return x * FACTOR
    """,
    "offset.py": """
        import numba


        @numba.njit(cache=True, nogil=True, inline="always")
        def offset():
            return 1
    """,
    "apply.py": """
        from . import KERNELS, registered_kernel
        from .offset import offset
        from .scale import scale


        def apply(x):
            return scale(x) + offset()


        apply = registered_kernel(apply, KERNELS)
    """,
}

RUN = ("from stamped.apply import apply; r = apply(10); "
       "print(r, sum(apply.stats.cache_hits.values()), sum(apply.stats.cache_misses.values()))")


def _write(root: Path) -> Path:
    package = root / "stamped"
    package.mkdir(parents=True)
    for name, text in PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    return package


def _run(root: Path, cache: Path | None) -> tuple[int, int, int]:
    """apply(10) in a fresh process: (result, cache hits, cache misses)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("NUMBA_CACHE_DIR", None)
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result, hits, misses = map(int, out.stdout.split())
    return result, hits, misses


def _edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def test_a_helper_changed_in_another_module_recompiles_the_kernel(tmp_path: Path):
    src, cache = tmp_path / "src", tmp_path / "cache"
    package = _write(src)
    assert _run(src, cache) == (21, 0, 1)  # compiled
    assert _run(src, cache) == (21, 1, 0)  # loaded
    assert list(cache.rglob("apply.apply-*.nbi")) and not list(package.rglob("*.nbi"))  # NUMBA_CACHE_DIR
    _edit(package / "scale.py", "FACTOR = 2", "FACTOR = 3")  # the same size; numba's stamps would load 21
    assert _run(src, cache) == (31, 0, 1)
    _edit(package / "offset.py", "return 1", "return 5")
    assert _run(src, cache) == (35, 0, 1)


def test_beside_the_sources_too(tmp_path: Path):
    package = _write(tmp_path)
    assert _run(tmp_path, None) == (21, 0, 1)
    assert list((package / "__pycache__").glob("apply.apply-*.nbi"))
    _edit(package / "scale.py", "FACTOR = 2", "FACTOR = 3")
    assert _run(tmp_path, None) == (31, 0, 1)
    assert _run(tmp_path, None) == (31, 1, 0)


def test_the_stamp_covers_every_module_of_the_tree_and_not_where_it_lies(tmp_path: Path):
    stamp = sources_stamp.__wrapped__  # not the process's memo
    package = _write(tmp_path / "a")
    before = stamp(str(package))
    copy = tmp_path / "b" / "stamped"
    shutil.copytree(package, copy)
    assert stamp(str(copy)) == before != stamp(ENGINE_TREE)  # a worktree's copy shares the cache
    for name in TOOLING:  # modules that compile nothing, and compiled files: not in the stamp
        (package / name).write_text("print('tooling')\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.py").write_text("X = 1\n")
    assert stamp(str(package)) == before
    (package / "offset.py").write_text((package / "offset.py").read_text().replace("1", "2"))
    assert stamp(str(package)) != before
    (copy / "sub").mkdir()
    (copy / "sub" / "more.py").write_text("X = 1\n")
    assert stamp(str(copy)) != before


def test_every_cached_function_of_ddflow_carries_its_trees_stamp():
    """The engine's and the codec's kernels, and the cached helpers of their modules."""
    import importlib
    import pkgutil

    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    import ddflow.daemon.formats.kernels as codec
    import ddflow.operators.kernels as engine

    found = 0
    for package in (engine, codec):
        tree = os.path.dirname(package.__file__)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if isinstance(value, CPUDispatcher) and isinstance(value._cache, FunctionCache) \
                        and value.py_func.__module__ == module.__name__:
                    assert value._cache._cache_file._source_stamp == sources_stamp(tree), info.name
                    found += 1
    assert found >= len(engine.KERNELS) + len(codec.KERNELS)
    assert sources_stamp(os.path.dirname(codec.__file__)) != sources_stamp(ENGINE_TREE)
