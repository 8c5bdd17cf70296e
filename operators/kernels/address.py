"""Columns by address: how one kernel call walks a variable number of buffers.

A spine holds a varying number of batches; handing each one to a kernel as its own argument would
cost a call (or a compiled specialization) per batch. Instead every batch lives in one int64 buffer
and a kernel receives a *table*: an int64 array of rows ``(address, sizes...)``. Inside the kernel,
:func:`column` turns an address back into an array view of the buffer.

What a caller must guarantee: every address in a table is the data address of a live, C-contiguous
int64 buffer at least as long as the sizes say, and the Python objects owning those buffers stay
referenced for the duration of the call (a trace keeps its batches and merges alive; a table built
from them is used at once). Kernels write through an address only where their contract says so.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import kernel


@intrinsic
def _pointer(typingctx, address):
    """The int64 ``address`` as a ``void*`` (compiled code only)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def column(address, n):
    """The ``n`` int64 values at ``address`` as a 1-D array view (compiled code only)."""
    return numba.carray(_pointer(address), (n,), np.int64)


def _column_in_python(address, n):
    """:func:`column` for a kernel running as Python (``interpreted``): the same view, by ctypes."""
    return np.ctypeslib.as_array((ctypes.c_int64 * int(n)).from_address(int(address)))


column.python_twin = _column_in_python


@kernel
def address(buffer):
    """The data address of the int64 array ``buffer``."""
    return buffer.ctypes.data
