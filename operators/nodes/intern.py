"""Interning as one operator: ``(record, id)`` for every record, ids unique among the records present.

The id of a record is ``key_hash((round, record))`` (modulo ``modulus``), found by collision rounds:
every present record starts at round zero; in each hash group of pairs the least ``(round, record)``
keeps its hash and every other pair moves to the next round, until no two collide. This node gives
the same output, at every time, as ``library.intern``'s loop of reductions (its reference), without a
Python call per record:

* Records are grouped by their round-zero hash. A group is named by the id of its hash (the hash is
  interned anyway: it is the id in the output), and arrays indexed by that id (from the least group
  id on) hold the group's first record, its status and that record's accumulated count. A group that
  never held two distinct records is ``SINGLE``: its record's id is its round-zero hash at every time,
  because a round-zero pair is the least of any group it is in. Its updates are mapped to
  ``(record, hash)`` in bulk.
* A group that sees a second record becomes ``MULTI``: from the batch where that happens its records
  go through the rounds, here in Python, one time at a time in time order (the times of a batch are
  complete and totally ordered, and every later batch lies beyond them). Its first record's earlier
  outputs stay valid: the group held one record at those times.
* A ``MULTI`` record that moves to round ``k`` lands in the group of its round-``k`` hash. A present
  round-zero record there wins that group; so that the rounds see its presence at every time, the
  group it lands in is ``WATCHED`` from then on (created empty when no record has that hash yet), and
  its record's updates are shown to the rounds as well as mapped in bulk.

* The output is ``(record, id)`` as two id columns (the record's, its id's as an int): a consumer
  that takes pair columns (a capture, ``Node.pair_columns``) gets them as they are, the others get
  the pairs' ids, interned once for them all.

The node runs in the outer scope (totally ordered times) of a single-worker dataflow; the library
uses its loop of reductions elsewhere. It keeps every group it has seen, holding the ids of their
hashes and first records.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..frontier import Antichain
from ..graph import Node, Scope
from ..kernels import rounds
from ..kernels.rounds import MULTI, SINGLE, WATCHED
from ..traces.batch import Updates
from ..values.ordering import sort_values

FULL = 1 << 63  # the modulus of the full 63-bit hash
_HELD_SLICE = 1 << 20  # held_ids reports the group arrays this many groups at a time


class _Restart(Exception):
    """A group must be watched before the rounds of a batch can be decided: start the batch again."""


class Intern(Node):
    """``(record, id)`` for each record of its input (see the module docstring)."""

    def __init__(self, scope: Scope, *, modulus: int = FULL) -> None:
        super().__init__(scope, name="intern")
        if scope.parent is not None:
            raise ValueError("the intern node runs in the outer scope")
        self.modulus = modulus
        # per id of a round-zero hash (a group) from _base on: its first record (-1: none yet), status,
        # that record's count (the arrays span the groups' ids, not every id below them)
        self._base = 0
        self._first = np.full(0, -1, dtype=np.int32)
        self._status = np.zeros(0, dtype=np.int8)
        self._counts = np.zeros(0, dtype=np.int64)
        # the records of MULTI groups: accumulated counts, and the (id, count) each one has in the output
        self._multi: dict[int, int] = {}
        self._out: dict[int, tuple[int, int]] = {}
        self._elements: dict[int, int] = {}  # element hashes of MULTI records (for later rounds)

    # -- the protocol --------------------------------------------------------------------------------
    def step(self, frontier: Antichain) -> None:
        u = self.take_complete(frontier)
        if len(u):
            self.emit_pairs(self._apply(u), spare=True)  # (record, id): the id column is the node's own

    def _groups(self) -> np.ndarray:
        return np.flatnonzero((self._first >= 0) | (self._status != SINGLE)) + self._base

    def held_ids(self):
        yield from super().held_ids()
        step = _HELD_SLICE  # a slice of the group arrays at a time: no column per group beside them
        for lo in range(0, len(self._first), step):
            first = self._first[lo : lo + step]
            held = np.flatnonzero((first >= 0) | (self._status[lo : lo + step] != SINGLE))
            yield held + (lo + self._base)
            yield first.take(held).astype(np.int64)
        yield np.fromiter(self._multi, dtype=np.int64, count=len(self._multi))

    def stats(self) -> dict[str, int]:
        """``{"groups", "multi", "watched"}``: round-zero hashes seen, groups in the rounds, groups watched."""
        return {"groups": len(self._groups()), "multi": int((self._status == MULTI).sum()),
                "watched": int((self._status == WATCHED).sum())}

    # -- a batch of complete updates -------------------------------------------------------------------
    def _apply(self, u: Updates) -> Updates:
        interner = self.interner
        records, times, diffs = u.data[0], u.times[:, 0], u.diffs
        # at most one new id per record for its hash, and one for its output pair unless every
        # consumer takes pair columns: the id columns grow once here rather than once per interning
        # call (each grow copies them)
        pairs = not all(node.pair_columns for node, _port in self.consumers)
        interner.reserve((1 + pairs) * len(records), ints=len(records))
        # the element hashes (a column of the node's own; an int is its own, as far as pair_hashes goes),
        # the pairs' hashes written over them, and their ids over those
        groups = interner.int_ids_into(rounds.pair_hashes_into(0, self._element_hashes(records), self.modulus % FULL))
        self._fit(groups)
        groups -= self._base  # indexes into the group arrays (in place) until the output is built
        became = rounds.claim(groups, records, self._first, self._status)
        if len(became):  # their first records' earlier outputs were (first, hash) with its count
            firsts = self._first.take(became)
            for g, first, e in zip(became.tolist(), firsts.tolist(), self._element_hashes(firsts).tolist()):
                self._elements[first] = e
                count = int(self._counts[g])
                if count:
                    self._multi[first] = count
                    self._out[first] = (int(interner.value(g + self._base)), count)
        slow = None
        status = self._status.take(groups)
        while (status != SINGLE).any():  # the batch touches groups in the rounds
            events = np.flatnonzero(status != SINGLE)
            base = self._base
            try:
                mine = records[events]  # element hashes again for these few, not kept for the batch
                slow = self._rounds(mine, times[events], diffs[events], groups[events] + base,
                                    self._element_hashes(mine), status[events])
                break
            except _Restart:  # a group is watched now (the arrays may start lower): its updates are events too
                groups += base - self._base
                status = self._status.take(groups)
                continue
        fast = status != MULTI  # (the rounds change no status but by a restart)
        del status
        rounds.add_counts(groups, diffs, self._status, self._counts)
        groups += self._base  # the hashes' ids again: the output's id column
        if fast.all():  # the common case
            out = Updates((records, groups), u.times, diffs)
        else:
            keep = np.flatnonzero(fast)
            out = Updates((records[keep], groups[keep]), u.times[keep], diffs[keep])
        del groups, fast
        if slow is None or len(slow[0]) == 0:
            return out
        recs, ids, ts, ds = slow
        return Updates((np.concatenate([out.data[0], recs]), np.concatenate([out.data[1], interner.int_ids(ids)])),
                       np.concatenate([out.times, ts.reshape(-1, 1)]), np.concatenate([out.diffs, ds]))

    def _element_hashes(self, records: np.ndarray) -> np.ndarray:
        ints = self.interner.int_values(records)
        return self.interner.element_hashes(records) if ints is None else ints

    def _fit(self, groups: np.ndarray) -> None:
        """Room in the arrays for the groups ``groups`` (ids): they span from the least id of a group
        seen (or a little lower) to the greatest (or a half more), so that a batch's groups, whose ids
        come after its records', cost no slots for the records' ids."""
        if len(groups) == 0:
            return
        lo, hi = int(groups.min()), int(groups.max()) + 1
        size = len(self._first)
        base, end = (self._base, self._base + size) if size else (lo, lo)
        if base <= lo and hi <= end:
            return
        start = base if base <= lo else max(0, min(lo, base - size // 2))
        stop = end if hi <= end else max(hi, end + size // 2)
        for name, fill in (("_first", -1), ("_status", SINGLE), ("_counts", 0)):
            old = getattr(self, name)
            # zeros by calloc: pages the batch never writes (statuses of lone groups) are never touched
            new = np.zeros(stop - start, dtype=old.dtype) if fill == 0 else np.full(stop - start, fill, dtype=old.dtype)
            new[base - start : base - start + size] = old
            setattr(self, name, new)
        self._base = start

    # -- the rounds, for MULTI groups -----------------------------------------------------------------
    def _rounds(self, records, times, diffs, groups, elements, status):
        """Output changes ``(record ids, id values, times, diffs)`` of the records of ``MULTI`` groups
        for the batch's events (updates of MULTI and WATCHED groups), one time at a time. Raises
        :class:`_Restart` (leaving the state of the node as it was, a new group watched) when a round
        lands in a group that is not watched yet."""
        multi = dict(self._multi)
        out = dict(self._out)
        watched: dict[int, int] = {}  # WATCHED group -> its record's count as the batch goes
        for r, e in zip(records.tolist(), elements.tolist()):
            self._elements.setdefault(r, e)
        order = np.argsort(times, kind="stable")
        recs, ts, ds, gs, st = (records[order].tolist(), times[order].tolist(), diffs[order].tolist(),
                                groups[order].tolist(), status[order].tolist())
        result: list[tuple[int, int, int, int]] = []
        i = 0
        while i < len(ts):
            t = ts[i]
            while i < len(ts) and ts[i] == t:
                g, r, d = gs[i], recs[i], ds[i]
                if st[i] == MULTI:
                    multi[r] = multi.get(r, 0) + d
                else:
                    watched[g] = watched.get(g, int(self._counts[g - self._base])) + d
                i += 1
            ids = self._assign([r for r, c in multi.items() if c], watched)
            for r in set(out) | {r for r, c in multi.items() if c}:
                old_id, old_c = out.get(r, (0, 0))
                new_c = multi.get(r, 0)
                new_id = ids.get(r, 0)
                if old_id == new_id and old_c != new_c:
                    result.append((r, new_id, t, new_c - old_c))
                elif old_id != new_id:
                    if old_c:
                        result.append((r, old_id, t, -old_c))
                    if new_c:
                        result.append((r, new_id, t, new_c))
            out = {r: (ids[r], c) for r, c in multi.items() if c}
        self._multi = {r: c for r, c in multi.items() if c}
        self._out = out
        if not result:
            e = np.empty(0, dtype=np.int64)
            return e, e, e, e
        cols = list(zip(*result))
        return tuple(np.array(c, dtype=np.int64) for c in cols)

    def _hash(self, round_: int, record: int) -> int:
        e = np.array([self._elements[record]], dtype=np.int64)
        return int(rounds.pair_hashes(round_, e, self.modulus % FULL)[0])

    def _assign(self, present: list[int], watched: dict[int, int]) -> dict[int, int]:
        """The id of each present record of the MULTI groups: collision rounds to a fixed point, where a
        present record of a SINGLE or WATCHED group holds its round-zero hash against every later round."""
        if not present:
            return {}
        values = dict(zip(present, self.interner.value_list(np.array(present, dtype=np.int64))))
        at = {r: 0 for r in present}
        while True:
            by_hash: dict[int, list[int]] = defaultdict(list)
            for r, k in at.items():
                by_hash[self._hash(k, r)].append(r)
            moved = []
            for h, members in by_hash.items():
                if min(at[r] for r in members) > 0 and self._holder(h, watched):
                    moved += members
                    continue
                if len(members) > 1:
                    pairs = [(at[r], values[r]) for r in members]
                    order = sort_values(pairs)
                    moved += [members[j] for j in order[1:]]
            if not moved:
                return {r: self._hash(k, r) for r, k in at.items()}
            for r in moved:
                at[r] += 1

    def _holder(self, h: int, watched: dict[int, int]) -> bool:
        """Whether a present round-zero record outside the MULTI groups has the hash ``h`` (it keeps
        it); raises :class:`_Restart` after watching ``h``'s group when it is not watched yet."""
        g = self.interner.int_ids(np.array([h], dtype=np.int64))
        self._fit(g)
        g = int(g[0])
        at = g - self._base
        if self._status[at] == MULTI:
            return False  # its round-zero records are among the pairs themselves
        if self._status[at] == WATCHED:
            return self._first[at] >= 0 and watched.get(g, int(self._counts[at])) != 0
        self._status[at] = WATCHED
        raise _Restart
