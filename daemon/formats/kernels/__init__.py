"""The msgpack codec's compiled kernels: input batches into columns (`unpack`), columns into
result updates (`pack`), each with its plain reference implementation beside it.

They follow the engine's kernel seam (`ddflow.operators.kernels`: a compiled function whose
docstring is its contract, a reference of the same contract, a property test holding the two
together) but live with the format they read and write, so the engine never sees msgpack. They
are registered in this package's own :data:`KERNELS`; ``python -m ddflow.daemon.formats.kernels.warm``
compiles them ahead of time, as the engine's warm-up does its own. The compiling decorators are
the engine's (`helper`, and `registered_kernel` filling this registry); otherwise the package may
import numba, numpy and msgpack (the references) only. The package is a kernel tree
(`ddflow.operators.kernels.kernel_tree`): a change to any of its modules or the engine's kernel
modules recompiles all its kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ....operators.kernels import helper, kernel_tree, registered_kernel

__all__ = ["KERNELS", "helper", "kernel"]

kernel_tree(__file__)  # its kernels' cache is stamped with this package's text and the engine's kernels'

F = TypeVar("F", bound=Callable)

KERNELS: dict[str, Callable] = {}  # "module.function" -> compiled dispatcher, filled as modules import


def kernel(fn: F) -> F:
    """Compile ``fn`` as a codec kernel: no Python objects, the GIL released, cached on disk."""
    return registered_kernel(fn, KERNELS)
