"""Kernels: pure functions on int64 columns that do the per-row work of an operator step.

The engine's hot loops live here, compiled to machine code by numba. Python decides *which* kernel
runs and with which columns; one kernel call then does all the per-row work of a step, so a step
costs a few Python calls whatever the number of rows.

The seam every kernel follows:

* A module per concept (``consolidate``, ``merge``, ``lookup``, ``hashtable``, ...) holds the compiled
  function (decorated with :func:`kernel`) and, beside it, a plain *reference* implementation of the
  same contract, written for clarity rather than speed. A property test holds the two to each other
  on random inputs and edge cases (empty, one row, all rows equal, int64 extremes, 1-3 dimensional
  times).
* The docstring of each kernel is its contract: what must be sorted how on entry, which arguments it
  may write into, what it returns. Callers (traces, values, nodes) honour the contract; kernels do
  not re-check it.
* Arguments are numpy arrays of int64 (or bool/int32 where said) and Python ints; a kernel never sees
  a Python object, and allocates its outputs itself.

Compiled code is cached on disk (``cache=True``): the first process compiles (about a second per
kernel), later ones load. numba keeps the cache beside the sources unless ``NUMBA_CACHE_DIR`` names
a writable directory, which read-only installs (containers, system packages) must set.
``python -m ddflow.operators.kernels.warm`` compiles every kernel ahead of time (the container image
runs it at build time); every kernel is listed in :data:`KERNELS` so that it can check none is missed.

A cached kernel holds the machine code of every helper it calls or inlines, from whichever module,
and of the constants it reads. numba stamps a function's cache with the text of the function's own
module only, so a kernel whose helper changed elsewhere would load its old code. Here every cached
function of a *kernel tree* (this package with its subpackages, and each package that declares
itself one with :func:`kernel_tree`) is stamped instead with the text of all the tree's modules and
this package's together (:func:`sources_stamp`): a change to any of them recompiles every kernel
that may depend on it, and a cache written from other sources is never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from typing import TypeVar

import numba
from numba.core import caching

F = TypeVar("F", bound=Callable)

KERNELS: dict[str, Callable] = {}  # "module.function" -> compiled dispatcher, filled as modules import

TOOLING = frozenset({"warm.py", "precompile.py", "interpreted.py"})  # a tree's modules that compile nothing: not in its stamp
ENGINE_TREE = os.path.dirname(os.path.abspath(__file__))
_TREES: set[str] = {ENGINE_TREE}  # directories of the kernel trees, each with its subdirectories


def kernel_tree(init_file: str) -> None:
    """Declare the package whose ``__init__.py`` is ``init_file`` a kernel tree: the on-disk cache
    of each function it compiles with ``cache=True`` (in it or its subpackages) is stamped with the
    text of all its modules and the engine's kernel modules (:func:`sources_stamp`). Call it in the
    package's ``__init__``, before any of its modules compiles a kernel."""
    _TREES.add(os.path.dirname(os.path.abspath(init_file)))


@functools.cache
def sources_stamp(tree: str) -> tuple[str, str]:
    """The stamp of the cached kernels of ``tree`` (a directory :func:`kernel_tree` declared, or
    :data:`ENGINE_TREE`): a SHA-256 of the path relative to its tree and the text of every module of
    the engine's tree and of ``tree``, subpackages included and :data:`TOOLING` left out. Two copies
    of the same sources (a worktree, an installed wheel) have the same stamp and so can share a
    cache. Computed once per process (a few milliseconds)."""
    digest = hashlib.sha256()
    for root in sorted({ENGINE_TREE, tree}):
        digest.update(b"tree\0")
        for directory, subdirectories, files in os.walk(root):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py") and f not in TOOLING):
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    text = f.read()
                digest.update(f"{os.path.relpath(path, root)}\0{len(text)}\0".encode())
                digest.update(text)
    return "ddflow kernel sources", digest.hexdigest()


def _tree_of(py_file: str) -> str | None:
    """The innermost kernel tree holding ``py_file``, or None."""
    path = os.path.abspath(py_file)
    found = [t for t in _TREES if path.startswith(t + os.sep)]
    return max(found, key=len) if found else None


class _TreeStamped:
    """numba's cache locators for the functions of a kernel tree, with the tree's stamp in place of
    the function's own module's; other functions are left to numba's locators (``from_function``
    says None)."""

    _tree: str

    @classmethod
    def from_function(cls, py_func, py_file):
        tree = _tree_of(py_file)
        if tree is None:
            return None
        locator = super().from_function(py_func, py_file)
        if locator is not None:
            locator._tree = tree
        return locator

    def get_source_stamp(self):
        return sources_stamp(self._tree)


class UserProvidedTreeLocator(_TreeStamped, caching.UserProvidedCacheLocator):
    """Under ``NUMBA_CACHE_DIR`` when set."""


class InTreeTreeLocator(_TreeStamped, caching.InTreeCacheLocator):
    """Beside the sources (``__pycache__``) when writable."""


class UserWideTreeLocator(_TreeStamped, caching.UserWideCacheLocator):
    """The user's cache directory otherwise."""


# numba's own order (the user's directory, beside the sources, the user's cache), ahead of numba's
# locators, which a kernel tree's functions never reach unless none of these is usable
_LOCATORS = [UserProvidedTreeLocator, InTreeTreeLocator, UserWideTreeLocator]
if caching.CacheImpl._locator_classes[:3] != _LOCATORS:
    caching.CacheImpl._locator_classes[:0] = _LOCATORS


def registered_kernel(fn: F, registry: dict[str, Callable]) -> F:
    """Compile ``fn`` as a kernel (no Python objects, the GIL released, cached on disk) and list it
    in ``registry`` as ``"module.function"``, the module's last name. Kernels outside the engine
    (the daemon's codec) use it with a registry of their own."""
    compiled = numba.njit(cache=True, nogil=True)(fn)
    registry[f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"] = compiled
    return compiled


def kernel(fn: F) -> F:
    """Compile ``fn`` as an engine kernel: no Python objects, the GIL released, cached on disk."""
    return registered_kernel(fn, KERNELS)


def helper(fn: F) -> F:
    """Compile ``fn`` as a part of kernels (a checked add, a pass of a larger kernel): only kernels
    call it, and each kernel's cache holds the helpers it calls, so a helper has no cache or
    :data:`KERNELS` entry of its own."""
    return numba.njit(nogil=True)(fn)
