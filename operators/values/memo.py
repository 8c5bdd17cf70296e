"""Memos: int64 codes mapped to the remembered results of a deterministic function.

User functions of ``map``/``filter`` and the record builders of joins are deterministic functions of
their inputs (as differential dataflow requires), and the same records recur at many times and in many
iterations. A ``Memo`` maps int64 codes (a record id, or two ids packed into one int64) to results, so
a batch costs Python work only for codes never seen before. Codes that are dense ids are remembered in
a direct array over their range; sparse or packed codes in a :class:`KeyTable`. A memo is a cache: its
table starts afresh once it holds ``limit`` codes, so a long run over ever new records (a join's outputs
on a sliding window) keeps it bounded, at the price of computing the records still in use once more;
and a memo over record ids is forgotten whenever ids are reclaimed (its codes could name other records).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..tuning import DEFAULT
from .ids import ID_LIMIT
from .keytable import KeyTable


class Memo:
    """``codes -> results`` for a function computed on the codes it has not seen yet.

    ``compute(codes)`` gets distinct new codes and returns one result per code; results must fit
    ``dtype`` and not be its least value (the mark of an unknown code). The memo starts afresh once its
    table holds ``limit`` codes."""

    def __init__(self, compute: Callable[[np.ndarray], np.ndarray], dtype: type = np.int64, *,
                 limit: int = DEFAULT.memo_limit) -> None:
        self.compute = compute
        self.dtype = np.dtype(dtype)
        self._missing = np.iinfo(self.dtype).min
        self.limit = limit
        self.restarts = 0  # times the memo started afresh
        self._empty()

    def clear(self) -> None:
        """Forget every code (a memo is a cache: what is asked again is computed again)."""
        self._empty()
        self.restarts += 1

    def _empty(self) -> None:
        self._count = 0
        self._lo = 0
        self._dense: np.ndarray | None = np.empty(0, dtype=self.dtype)  # results of codes lo, lo + 1, …
        self._table: KeyTable | None = None  # once codes are sparse: their table, and results by index
        self._results = np.empty(0, dtype=self.dtype)

    def full(self) -> bool:
        """Whether the memo's table holds its limit of codes (the next call starts afresh)."""
        return self._table is not None and self._table.n >= self.limit

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        if self._dense is not None:
            return self._dense.nbytes
        return self._table.nbytes() + self._results.nbytes

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        if len(codes) == 0:
            return np.empty(0, dtype=np.int64)
        if self._dense is not None and self._fits_dense(codes):
            return self._call_dense(codes)
        if self._dense is not None:
            self._to_table()
        return self._call_table(codes)

    def _fits_dense(self, codes: np.ndarray) -> bool:
        lo, hi = int(codes.min()), int(codes.max())
        if lo < 0 or hi >= ID_LIMIT:
            return False
        if len(self._dense):
            lo, hi = min(lo, self._lo), max(hi, self._lo + len(self._dense) - 1)
        return hi - lo + 1 <= 4 * (self._count + len(codes)) + 4096

    def _call_dense(self, codes: np.ndarray) -> np.ndarray:
        self._cover(int(codes.min()), int(codes.max()))
        lo = self._lo
        missing = self._dense[codes - lo if lo else codes] == self._missing
        if missing.any():
            # the distinct new codes (sorted), with nothing else of the batch alive while computing
            new = np.sort(codes[missing])
            del missing
            first = np.ones(len(new), dtype=bool)
            first[1:] = new[1:] != new[:-1]
            new = new[first]
            del first
            results = self._checked(self.compute(new), len(new))
            self._dense[new - lo if lo else new] = results
            self._count += len(new)
            del new, results
        return self._dense[codes - lo if lo else codes].astype(np.int64)

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the dense array to cover codes ``lo..hi`` (with slack on the growing side)."""
        dense = self._dense
        if len(dense) == 0:
            self._lo = lo
            self._dense = np.full(max(hi - lo + 1, 1024), self._missing, dtype=self.dtype)
            return
        cur_lo, cur_hi = self._lo, self._lo + len(dense) - 1
        if lo >= cur_lo and hi <= cur_hi:
            return
        span = cur_hi - cur_lo + 1
        new_lo = min(lo, cur_lo)
        if lo < cur_lo:
            new_lo = max(0, min(lo, cur_lo - span // 2))
        new_hi = max(hi, cur_hi)
        if hi > cur_hi:
            new_hi = max(hi, cur_hi + span // 2)
        grown = np.full(new_hi - new_lo + 1, self._missing, dtype=self.dtype)
        grown[cur_lo - new_lo : cur_lo - new_lo + span] = dense
        self._lo, self._dense = new_lo, grown

    def _to_table(self) -> None:
        known = np.flatnonzero(self._dense != self._missing)
        self._table = KeyTable()
        self._results = np.empty(max(len(known), 16), dtype=self.dtype)
        if len(known):
            idx = self._table.index(known + self._lo)
            self._results[idx] = self._dense[known]
        self._dense = None

    def _call_table(self, codes: np.ndarray) -> np.ndarray:
        if self.full():
            self.clear()
            return self(codes)
        table = self._table
        before = table.n
        idx = table.index(codes)
        if table.n > before:
            new_codes = table.keys[before:]
            try:
                results = self._checked(self.compute(new_codes), len(new_codes))
            except BaseException:
                self._forget(before)
                raise
            if table.n > len(self._results):
                grown = np.empty(max(table.n, 2 * len(self._results)), dtype=self.dtype)
                grown[:before] = self._results[:before]
                self._results = grown
            self._results[before : table.n] = results
            self._count = table.n
        return self._results[idx].astype(np.int64, copy=False)

    def _forget(self, n: int) -> None:
        """Drop the codes numbered from ``n`` on (their results could not be computed); the others
        keep their numbers, which index their results."""
        keys = self._table.keys[:n].copy()
        self._table = KeyTable()
        self._table.append(keys)

    def _checked(self, results, n: int) -> np.ndarray:
        results = np.asarray(results)
        if len(results) != n:
            raise ValueError(f"memo: compute returned {len(results)} results for {n} codes")
        return results.astype(self.dtype, copy=False)

