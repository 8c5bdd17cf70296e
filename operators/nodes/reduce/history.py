"""The histories a reduction keeps per key between rounds, so that a round reads the change, not the
key's whole history.

After a round, each of the round's keys has its input and output rows as the round saw them: the
rows its traces held for it plus what the round added. :class:`KeyHistory` keeps them, condensed:
every time advanced to ``g`` (the join with ``g``, a time every later evaluation is at or beyond) and
equal ``(val, time)`` summed, zeros dropped. Advancing by ``g`` changes no accumulation at a time
``>= g`` (the trace's own compaction rule), so the condensed rows stand for the key's history at
every point a later round evaluates: rows of earlier outer times collapse into one per val, and
inside a loop the rows of an epoch's earlier rounds collapse into one per outer time and val,
whatever the number of rounds that wrote them.

A later round whose keys are kept reads their runs plus the round's own new input rows (the only rows
the input trace gained for them since: every insert into the input arrangement reaches the reduction
as new input, and the reduction writes its output trace itself), and looks up only the other keys.

What a caller may assume: :meth:`valid_at` is false once a round's inner coordinates are not all at
or beyond those of every earlier condensation (a new epoch of a loop starts again at iteration
zero): the caller then :meth:`clear`s. Entries never leave one by one; :meth:`clear` drops them all
(the reduction clears when the rows kept pass its configured bound, so memory stays bounded).
"""

from __future__ import annotations

import numpy as np

from ...kernels import hashtable as ht
from ...kernels.reduce.history import history_gather, history_store
from ...traces.batch import Updates, keyed_columns



def _read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view (one kernel specialisation, whoever wrote the columns)."""
    v = a.view()
    v.flags.writeable = False
    return v


_NONE = _read_only(np.empty(0, np.int64))


class _Arena:
    """The runs of one side (input or output): columns ``(val, time, diff)`` with ``used`` rows taken."""

    __slots__ = ("v", "t", "d", "used")

    def __init__(self, depth: int) -> None:
        self.v = np.empty(0, np.int64)
        self.t = np.empty((0, depth), np.int64)
        self.d = np.empty(0, np.int64)
        self.used = 0


class KeyHistory:
    """Condensed input and output rows per key, for the keys of a reduction's recent rounds (see the
    module docstring)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._no_times = _read_only(np.empty((0, depth), np.int64))
        self.clear()

    def clear(self) -> None:
        """Forget every key."""
        self._slots = np.full(ht.MIN_CAPACITY, -1, np.int32)
        self._keys = np.empty(64, np.int64)  # the key of each entry
        self.count = 0  # keys kept
        self._start = {"in": np.zeros(64, np.int64), "out": np.zeros(64, np.int64)}
        self._length = {"in": np.zeros(64, np.int64), "out": np.zeros(64, np.int64)}
        self._arena = {"in": _Arena(self.depth), "out": _Arena(self.depth)}
        self.inner: np.ndarray | None = None  # componentwise max of the inner coordinates condensed at
        self.rows = 0  # rows kept, both sides

    def valid_at(self, inner: np.ndarray) -> bool:
        """True when a round at inner coordinates ``inner`` may read the kept rows."""
        return self.inner is None or bool((inner >= self.inner).all())

    def entries(self, keys: np.ndarray) -> np.ndarray:
        """Per key its entry, ``-1`` for a key not kept."""
        if self.count == 0:
            return np.full(len(keys), -1, np.int64)
        return ht.find(self._slots, self._keys, keys)

    def gather(self, keys: np.ndarray, entries: np.ndarray, new: Updates) -> tuple[Updates, Updates, int]:
        """``(input rows, output rows, new rows among the input rows)`` of the kept ones among the sorted
        distinct ``keys`` (``entries`` theirs, ``-1`` for a key not kept): a key's kept input rows are
        followed by its rows of ``new`` (input rows of ``keys`` only)."""
        a = self._arena["in"]
        nk, nv = new.data
        k, v, t, d, n_new = history_gather(keys, entries, self._start["in"], self._length["in"], a.v, a.t, a.d,
                                           _read_only(nk), _read_only(nv), _read_only(new.times),
                                           _read_only(new.diffs))
        inp = Updates((k, v), t, d)
        a = self._arena["out"]
        k, v, t, d, _ = history_gather(keys, entries, self._start["out"], self._length["out"], a.v, a.t, a.d,
                                       _NONE, _NONE, self._no_times, _NONE)
        return inp, Updates((k, v), t, d), int(n_new)

    def store(self, keys: np.ndarray, inp: Updates, out: Updates, g: np.ndarray) -> bool:
        """Keep ``inp`` and ``out`` (rows of the sorted distinct ``keys``, any order) as the histories of
        ``keys``, every time advanced to ``g`` (the inner coordinates ``g[1:]`` join ``inner``).
        Returns false when a condensed sum leaves int64 (the caller clears)."""
        entries = self._insert(keys)
        for side, u in (("in", inp), ("out", out)):
            a = self._arena[side]
            length = self._length[side]
            self.rows -= int(length.take(entries).sum())
            k, v, t, d = keyed_columns(u)  # (an empty batch's, one gather passed through: read-only)
            a.v, a.t, a.d, a.used, ok = history_store(keys, entries, k, v, t, d, g,
                                                      self._start[side], length, self.count, a.v, a.t, a.d, a.used)
            if not ok:
                return False
            self.rows += int(length.take(entries).sum())
        inner = g[1:]
        self.inner = inner.copy() if self.inner is None else np.maximum(self.inner, inner)
        return True

    def _insert(self, keys: np.ndarray) -> np.ndarray:
        """The entries of ``keys``, adding the keys not kept yet."""
        while True:
            out, self._slots, self.count, _, _, done = ht.insert(
                self._slots, self._keys, keys, self.count, self._keys[:0], 0, self.count, 1 << 31)
            if done == len(keys):
                break
            grown = np.empty(2 * len(self._keys), np.int64)
            grown[: self.count] = self._keys[: self.count]
            self._keys = grown
        n = len(self._keys)
        for side in ("in", "out"):
            if len(self._start[side]) < n:
                for table in (self._start, self._length):
                    grown = np.zeros(n, np.int64)
                    grown[: len(table[side])] = table[side]
                    table[side] = grown
        return out

    def held_ids(self):
        """The ids the kept rows name: keys, input vals, output vals."""
        yield self._keys[: self.count]
        for side in ("in", "out"):
            a = self._arena[side]
            yield a.v[: a.used]
