"""Immutable sorted batches in trie layout.

A ``TrieBatch`` holds consolidated keyed updates ``((key, val), time, diff)`` sorted by key, val and
time, as a columnar trie: ``keys`` (distinct, sorted) with ``key_offs`` into ``vals``; ``vals`` (sorted
within a key) with ``val_offs`` into the ``times``/``diffs`` histories. The columns are regions of one
int64 buffer (:mod:`ddflow.operators.kernels.trie`), so a kernel walks any number of batches given
their addresses and sizes (:attr:`TrieBatch.row`). Its ``Description`` says which updates it holds:
those with ``lower <= time`` and not ``upper <= time``, with times advanced to ``since``.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from ..frontier import Antichain
from ..kernels import address as addresses
from ..kernels import lookup as lookups
from ..kernels import trie as layout
from .batch import Updates, consolidate, sum_error


_LARGE = 1 << 16  # updates from which a batch's buffer is allocated by numpy
_INT64 = np.dtype(np.int64)


class Description(tuple):
    """The time interval ``[lower, upper)`` of a batch's updates, and the frontier ``since`` they are
    advanced to: ``Description((lower, upper, since))``, an immutable triple compared as one. A tuple
    whose fields are read by C getters: one is made at every insert, without a Python call."""

    __slots__ = ()
    lower: Antichain = property(itemgetter(0), doc="Every update's time is beyond it.")  # type: ignore[assignment]
    upper: Antichain = property(itemgetter(1), doc="No update's time is beyond it.")  # type: ignore[assignment]
    since: Antichain = property(itemgetter(2), doc="The times are advanced to it.")  # type: ignore[assignment]


def int64(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous int64 array (itself when it already is one): what kernels take."""
    if a.dtype == np.int64 and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(a, dtype=np.int64)


class TrieBatch:
    """Consolidated keyed updates in a keys -> vals -> (time, diff) trie, in one int64 buffer.

    ``nk``, ``nv``, ``n``: distinct keys, distinct (key, val) pairs, updates; ``depth``: time
    coordinates. The column properties are (strided) views of the buffer: never write into them.
    """

    __slots__ = ("buffer", "nk", "nv", "n", "depth", "desc", "row")

    def __init__(self, buffer: np.ndarray, nk: int, nv: int, n: int, depth: int, desc: Description,
                 address: int | None = None) -> None:
        self.buffer, self.nk, self.nv, self.n, self.depth, self.desc = buffer, nk, nv, n, depth, desc
        #: ``(address, nk, nv, n)``: this batch as a row of a kernel table (``address``: the buffer's data)
        self.row = (addresses.address(buffer) if address is None else address, nk, nv, n)

    @staticmethod
    def from_updates(u: Updates, desc: Description) -> TrieBatch:
        """Build from keyed updates ``data == (keys, vals)`` that are consolidated (sorted, no zeros)."""
        n = len(u.diffs)
        if n == 0:
            return TrieBatch.empty(u.depth, desc)
        k, v, times, diffs = u.data[0], u.data[1], u.times, u.diffs
        if not (k.dtype == v.dtype == times.dtype == diffs.dtype == _INT64 and k.flags.c_contiguous
                and v.flags.c_contiguous and times.flags.c_contiguous and diffs.flags.c_contiguous):
            k, v, times, diffs = int64(k), int64(v), int64(times), int64(diffs)
        if n < _LARGE:
            buffer, address, nk, nv = layout.build(k, v, times, diffs)
        else:  # numpy's allocation: large buffers get huge pages (fewer TLB misses when searched)
            nk, nv = layout.count(k, v)
            buffer = np.empty(layout.size(nk, nv, n, u.depth), dtype=np.int64)
            address = layout.build_into(buffer, k, v, times, diffs, nk, nv)
        return TrieBatch(buffer, nk, nv, n, u.depth, desc, address)

    @staticmethod
    def consolidating(u: Updates, desc: Description) -> TrieBatch:
        """Build from keyed updates ``data == (keys, vals)`` in any order, with repeats and zero diffs,
        consolidated on the way; a small batch in one kernel call (:func:`~ddflow.operators.kernels.trie.
        build_small`). Raises :class:`~ddflow.operators.errors.DiffError` when the diffs of a (key, val,
        time) sum outside int64."""
        n = len(u.diffs)
        if n == 0 or n > layout.SMALL:
            c = consolidate(u)
            return TrieBatch.from_updates(c, desc) if len(c.diffs) else TrieBatch.empty(u.depth, desc)
        k, v, times, diffs = u.data[0], u.data[1], u.times, u.diffs
        if not (k.dtype == v.dtype == times.dtype == diffs.dtype == _INT64 and k.flags.c_contiguous
                and v.flags.c_contiguous and times.flags.c_contiguous and diffs.flags.c_contiguous):
            k, v, times, diffs = int64(k), int64(v), int64(times), int64(diffs)
        d = times.shape[1]
        out = np.empty(n * (d + 5) + 3, dtype=np.int64)  # layout.size(n, n, n, d): room for any result
        address, nk, nv, n, end, bad = layout.build_small(k, v, times, diffs, out)
        if bad >= 0:
            raise sum_error((int(k[bad]), int(v[bad])), tuple(times[bad].tolist()))
        if n == 0:
            return TrieBatch.empty(d, desc)
        return TrieBatch(out[:end], nk, nv, n, d, desc, address)

    @staticmethod
    def empty(depth: int, desc: Description) -> TrieBatch:
        return TrieBatch(np.zeros(layout.size(0, 0, 0, depth), dtype=np.int64), 0, 0, 0, depth, desc)

    # -- layout ------------------------------------------------------------------------------------
    @property
    def address(self) -> int:
        """The data address of the buffer (for kernel tables)."""
        return self.row[0]

    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ko, va, up, ri, _ = layout.layout(self.nk, self.nv, self.n, self.depth)
        b = self.buffer
        return b[:ko], b[ko:va], b[va:up].reshape(-1, 2), b[up:ri].reshape(self.n, self.depth + 1)

    @property
    def keys(self) -> np.ndarray:
        """The distinct keys, ascending."""
        return self._tables()[0]

    @property
    def key_offs(self) -> np.ndarray:
        """``key_offs[i] .. key_offs[i + 1]``: the vals of key ``i`` (``nk + 1`` entries)."""
        return self._tables()[1]

    @property
    def vals(self) -> np.ndarray:
        """The vals of every key, ascending within a key."""
        return self._tables()[2][:-1, 0]

    @property
    def val_offs(self) -> np.ndarray:
        """``val_offs[j] .. val_offs[j + 1]``: the updates of val ``j`` (``nv + 1`` entries)."""
        return self._tables()[2][:, 1]

    @property
    def times(self) -> np.ndarray:
        """``(n, depth)``: the time of every update."""
        return self._tables()[3][:, :-1]

    @property
    def diffs(self) -> np.ndarray:
        """The diff of every update."""
        return self._tables()[3][:, -1]

    def __len__(self) -> int:
        return self.n

    def nbytes(self) -> int:
        return self.buffer.nbytes

    # -- reading -----------------------------------------------------------------------------------
    def flat(self, lo: int = 0, hi: int | None = None) -> Updates:
        """The updates of keys with index in ``[lo, hi)`` as flat columns ``(key, val)`` (new arrays)."""
        hi = self.nk if hi is None else hi
        if self.n == 0 or lo >= hi:
            return Updates.empty(2, self.depth)
        keys, vals, times, diffs = lookups.expand(self.buffer, self.nk, self.nv, self.n, self.depth, lo, hi)
        return Updates((keys, vals), times, diffs)

    def key_weights(self) -> np.ndarray:
        """Number of (time, diff) entries under each key."""
        val_offs, key_offs = self.val_offs, self.key_offs
        return val_offs[key_offs[1:]] - val_offs[key_offs[:-1]]

    def lookup(self, query: np.ndarray) -> Updates:
        """All updates whose key is in ``query`` (any int64 keys), by key, val and time."""
        table = np.asarray([self.row], dtype=np.int64)
        k, v, t, d = lookups.lookup(int64(np.asarray(query)), table, self.depth)
        return Updates((k, v), t, d)
