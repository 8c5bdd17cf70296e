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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numba

F = TypeVar("F", bound=Callable)

KERNELS: dict[str, Callable] = {}  # "module.function" -> compiled dispatcher, filled as modules import


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
