"""The trie layout of a batch: one int64 buffer that kernels walk by address.

A batch of consolidated keyed updates ``(key, val, time, diff)``, sorted by key, val and time
(lexicographically), is a trie of ``nk`` distinct keys, ``nv`` distinct (key, val) pairs and ``n``
updates of ``d`` time coordinates, stored as consecutive regions of one buffer:

    keys[nk] | key_offs[nk + 1] | vals[nv] | val_offs[nv + 1] | diffs[n] | times[n * d]

``key_offs[i] .. key_offs[i + 1]`` are the vals of key ``i`` (sorted, distinct); ``val_offs[j] ..
val_offs[j + 1]`` the updates of val ``j`` (times sorted lexicographically and distinct, diffs
non-zero); ``times`` is row-major, one row of ``d`` coordinates per update. A kernel needs only the
buffer's address and ``(nk, nv, n, d)`` to walk it (see :mod:`.address`), so one call can walk any
number of batches. ``size(nk, nv, n, d)`` is the buffer's length.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernel


def _regions(nk, nv, n, d):
    """Start of each region: ``(key_offs, vals, val_offs, diffs, times, end)``."""
    ko = nk
    va = ko + nk + 1
    vo = va + nv
    di = vo + nv + 1
    ti = di + n
    return ko, va, vo, di, ti, ti + n * d


regions = numba.njit(cache=True, nogil=True, inline="always")(_regions)  # layout() inside kernels


def layout(nk: int, nv: int, n: int, d: int) -> tuple[int, int, int, int, int, int]:
    """Start of each region of a trie buffer: ``(key_offs, vals, val_offs, diffs, times, end)``."""
    return _regions(nk, nv, n, d)


def size(nk: int, nv: int, n: int, d: int) -> int:
    """Length of the buffer of a trie with these sizes."""
    return 2 * nk + 2 * nv + 2 + n * (d + 1)


@kernel
def build(keys, vals, times, diffs):
    """``(buffer, address, nk, nv)``: the trie of consolidated keyed updates.

    On entry ``keys``, ``vals``, ``diffs`` (length ``n``) and ``times`` (``(n, d)``, C-contiguous) are
    sorted by (key, val, time) with no (key, val, time) repeated; nothing is checked. The buffer is
    new; ``address`` is its data address.
    """
    n = len(keys)
    d = times.shape[1]
    nk = 0
    nv = 0
    for i in range(n):
        if i == 0 or keys[i] != keys[i - 1]:
            nk += 1
            nv += 1
        elif vals[i] != vals[i - 1]:
            nv += 1
    ko, va, vo, di, ti, end = regions(nk, nv, n, d)
    buf = np.empty(end, np.int64)
    k = -1
    v = -1
    for i in range(n):
        new_key = i == 0 or keys[i] != keys[i - 1]
        if new_key or vals[i] != vals[i - 1]:
            v += 1
            buf[va + v] = vals[i]
            buf[vo + v] = i
            if new_key:
                k += 1
                buf[k] = keys[i]
                buf[ko + k] = v
        buf[di + i] = diffs[i]
        for c in range(d):
            buf[ti + i * d + c] = times[i, c]
    buf[ko + nk] = nv
    buf[vo + nv] = n
    return buf, buf.ctypes.data, nk, nv


def build_reference(keys: np.ndarray, vals: np.ndarray, times: np.ndarray, diffs: np.ndarray) -> np.ndarray:
    """The buffer :func:`build` makes, by numpy: distinct keys and (key, val) pairs and their offsets."""
    n = len(keys)
    new_val = np.ones(n, dtype=bool)
    new_val[1:] = (keys[1:] != keys[:-1]) | (vals[1:] != vals[:-1])
    val_starts = np.flatnonzero(new_val)
    new_key = np.ones(len(val_starts), dtype=bool)
    new_key[1:] = keys[val_starts][1:] != keys[val_starts][:-1]
    key_starts = np.flatnonzero(new_key)
    return np.concatenate([
        keys[val_starts][key_starts], key_starts, [len(val_starts)],
        vals[val_starts], val_starts, [n], diffs, times.reshape(-1),
    ]).astype(np.int64)
