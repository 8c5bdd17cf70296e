"""Windows over the nanosecond times: tumbling, sliding and session windows as collections that
retract at the window's end.

A window is a half-open interval of outer times ``[start, end)``, named by its ``start``. The
windowed collection holds ``(start, record)`` records, and reads the *updates* of its input as
events: an update ``(record, u, diff)`` counts in every window ``[start, end)`` that contains its
time ``u``. At a time ``t`` the windowed collection is

    ``{(start, record): the sum of the diffs of record's updates at times u in [start, t]}``

for every window with ``start <= t < end``; a window is empty from its ``end`` on. So the record
``(start, record)`` appears at the time of the update that brings it and is retracted at ``end``,
the first time outside the window. For an input that only grows (a stream of events) a window holds
the events of its interval seen so far; a retraction in the input at ``u`` is a negative event in
the windows containing ``u`` (the window then holds the change of the collection since ``start``).
Updates whose diffs sum to zero at one time are no event.

* ``tumbling_windows(c, width, offset=0)``: windows ``[offset + k*width, offset + (k+1)*width)``
  for every integer ``k``: each time lies in exactly one.
* ``sliding_windows(c, size, period, offset=0)``: windows ``[offset + k*period, offset +
  k*period + size)``: a time lies in about ``size / period`` of them (none in the gaps when
  ``size < period``).
* ``session_windows(c, gap)`` on ``(key, val)`` records: per key, the times at which the key has an
  event, cut wherever two consecutive ones are ``gap`` or more apart; a session runs from its first
  event to ``gap`` after its last, ``[first, last + gap)``. Records are ``(first, (key, val))``;
  while a session is open its end is not known yet: it is the time its records are retracted.

Windows are an outer-scope operator (times are nanoseconds, not loop rounds). A window whose end
lies beyond the largest int64 time never ends. Tumbling and sliding windows are linear (each
update on its own, no state but the retractions held until their time); session windows keep, per
key, the open session (its start, last event and records), route keys to their owner worker first,
and process each epoch's complete updates in time order. Windows are made from the times of the
updates they are given: an input restored from a checkpoint enters at one time (the daemon's
restore puts the collection accumulated before the checkpoint's frontier ``F`` at ``F - 1``), so
the windows open at ``F - 1`` hold that whole collection until they end, and exact windows resume
with the first window that opens after it.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import GraphError
from ..frontier import Antichain
from ..graph import Node, Scope
from ..lattice import T_MAX, T_MIN
from ..traces.batch import Updates, concat, consolidate
from .exchange import Exchange

__all__ = ["session_windows", "sliding_windows", "tumbling_windows"]


def _positive(name: str, value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < value <= T_MAX:
        raise GraphError(f"{what} needs a positive int {name} (nanoseconds), got {value!r}")
    return int(value)


def _outer(collection, what: str):
    if collection.scope.parent is not None:
        raise GraphError(f"{what} works on outer (nanosecond) times: apply it outside iterate")
    return collection


# -- tumbling and sliding windows -----------------------------------------------------------------
def window_starts(times: np.ndarray, size: int, period: int, offset: int) -> tuple[np.ndarray, list | np.ndarray]:
    """``(rows, starts)``: for each time ``t`` of the int64 column ``times``, the starts of the
    windows ``[offset + k*period, offset + k*period + size)`` that contain it, latest first;
    ``rows[i]`` is the index of the time of ``starts[i]``. ``0 <= offset < period``. Exact for every
    int64 time: ``starts`` is an int64 array, or a list of ints when some start lies below the least
    int64 time (a window reaching back past it)."""
    d = (np.mod(times, period) - offset) % period  # t minus the latest start at or before it
    counts = np.where(d < size, (size - 1 - d) // period + 1, 0)  # j = 0.. with d + j*period < size
    rows = np.repeat(np.arange(len(times)), counts)
    j = np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows]
    if len(times) and int(times.min()) - size - period < T_MIN:  # near the least time: exact ints
        exact = zip(times[rows].tolist(), d[rows].tolist(), j.tolist())
        return rows, [t - e - k * period for t, e, k in exact]
    return rows, times[rows] - d[rows] - j * period


class HeldUpdates:
    """Updates waiting for their (outer) time to become complete, in time-sorted runs merged
    geometrically as they are added (a run is merged into the one before it while that one is at
    most twice its size), so releasing what a frontier completes costs a binary search per run, a
    logarithmic number of them, plus the updates released."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.runs: list[Updates] = []

    def __len__(self) -> int:
        return sum(len(run) for run in self.runs)

    def add(self, u: Updates) -> None:
        if not len(u):
            return
        self.runs.append(u.take(np.argsort(u.times[:, 0], kind="stable")))
        runs = self.runs
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            both = concat(runs[-2:])
            runs[-2:] = [both.take(np.argsort(both.times[:, 0], kind="stable"))]

    def release(self, frontier: Antichain) -> Updates:
        """Remove and return the updates at times not beyond ``frontier`` (all of them when empty)."""
        if not self.runs:
            return Updates.empty(self.width, 1)
        if frontier.is_empty():
            out, self.runs = concat(self.runs), []
            return out
        (f,) = frontier.elements[0]
        out, kept = [], []
        for run in self.runs:
            cut = int(np.searchsorted(run.times[:, 0], f, side="left"))
            if cut:
                out.append(run.take(np.arange(cut)))
            if cut < len(run):
                kept.append(run if cut == 0 else run.take(np.arange(cut, len(run))))
        self.runs = kept
        return concat(out, self.width, 1)

    def times(self) -> list[np.ndarray]:
        return [run.times for run in self.runs]

    def ids(self) -> list[np.ndarray]:
        return [run.data[0] for run in self.runs]


class Windows(Node):
    """``(start, record)`` at each update's time for every window containing it, and the same
    update negated at the window's end, held here until that time is complete."""

    observes_frontier = True  # held retractions are released as the frontier passes them

    def __init__(self, scope: Scope, *, size: int, period: int, offset: int, name: str) -> None:
        super().__init__(scope, name=name)
        self.size, self.period, self.offset = size, period, offset % period
        self.held = HeldUpdates(1)

    def step(self, frontier: Antichain) -> None:
        u = self.take_all()
        out = [self.stamp(u)] if len(u) else []
        out.append(self.held.release(frontier))
        self.emit(concat(out, 1, 1))

    def stamp(self, u: Updates) -> Updates:
        """The window records of ``u`` at its times; their retractions go to the held ones."""
        rows, starts = window_starts(u.times[:, 0], self.size, self.period, self.offset)
        interner = self.interner
        exact = isinstance(starts, list)
        start_ids = interner.ids(starts) if exact else interner.int_ids(starts)
        ids = interner.pair(start_ids, u.data[0][rows])
        diffs = u.diffs[rows]
        last = T_MAX - self.size  # windows starting after it end beyond int64 time: never
        ending = np.array([s <= last for s in starts], dtype=bool) if exact else starts <= last
        ends = np.array([s + self.size for s, e in zip(starts, ending) if e], dtype=np.int64) if exact \
            else starts[ending] + self.size
        self.held.add(Updates((ids[ending],), ends.reshape(-1, 1), -diffs[ending]))
        return Updates((ids,), u.times[rows], diffs)

    def holds_work(self) -> bool:
        return super().holds_work() or bool(self.held.runs)

    def pending_times(self) -> np.ndarray:
        parts = [super().pending_times(), *self.held.times()]
        return np.concatenate(parts)

    def held_ids(self):
        yield from super().held_ids()
        yield from self.held.ids()


def sliding_windows(collection, size: int, period: int, *, offset: int = 0):
    """``(start, record)`` for the windows ``[offset + k*period, offset + k*period + size)``, ``k``
    any integer: each update of ``collection`` counts in every window containing its time, from its
    time until the window's end (see the module). ``size``, ``period``: positive nanoseconds."""
    size = _positive("size", size, "sliding_windows")
    period = _positive("period", period, "sliding_windows")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise GraphError(f"sliding_windows needs an int offset (nanoseconds), got {offset!r}")
    c = _outer(collection, "sliding_windows")
    return c._then(Windows(c.scope, size=size, period=period, offset=int(offset), name="sliding_windows"))


def tumbling_windows(collection, width: int, *, offset: int = 0):
    """``(start, record)`` for the windows ``[offset + k*width, offset + (k+1)*width)``: each update
    of ``collection`` counts in the one window containing its time, until that window's end (see
    the module). ``width``: positive nanoseconds."""
    width = _positive("width", width, "tumbling_windows")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise GraphError(f"tumbling_windows needs an int offset (nanoseconds), got {offset!r}")
    c = _outer(collection, "tumbling_windows")
    return c._then(Windows(c.scope, size=width, period=width, offset=int(offset), name="tumbling_windows"))


# -- session windows ------------------------------------------------------------------------------
class Sessions(Node):
    """Session windows of ``(key, val)`` records (see the module), one open session per key.

    Each step takes the updates at complete times, consolidated (a record's diffs at one time
    summing to zero make no event), and goes through them per key in time order: an event less than
    ``gap`` after the key's last one joins its session, any other closes it (its records retracted
    at ``last + gap``) and opens a new one. Then every session that no future event can extend
    (``last + gap`` not beyond the frontier) is closed."""

    observes_frontier = True  # sessions close as the frontier passes their end

    def __init__(self, scope: Scope, *, gap: int) -> None:
        super().__init__(scope, name="session_windows")
        self.gap = gap
        self.open: dict[int, list] = {}  # key id -> [start, last, {record id: count}]
        self.ends: list[tuple[int, int]] = []  # (last + gap, key id); stale entries skipped

    def step(self, frontier: Antichain) -> None:
        recs, starts, times, diffs = [], [], [], []
        u = self.take_complete(frontier)
        if len(u):
            u = consolidate(u)
            keys, _ = self.interner.split(u.data[0], self.name)
            order = np.lexsort((u.times[:, 0], keys))
            gap, sessions, ends = self.gap, self.open, self.ends
            for key, rec, t, d in zip(keys[order].tolist(), u.data[0][order].tolist(),
                                      u.times[order, 0].tolist(), u.diffs[order].tolist()):
                s = sessions.get(key)
                if s is None or t - s[1] >= gap:
                    if s is not None:
                        self._close(key, s, recs, starts, times, diffs)
                    s = sessions[key] = [t, t, {}]
                    if t <= T_MAX - gap:
                        heapq.heappush(ends, (t + gap, key))
                elif t != s[1]:
                    s[1] = t
                    if t <= T_MAX - gap:
                        heapq.heappush(ends, (t + gap, key))
                contents = s[2]
                count = contents.get(rec, 0) + d
                if count:
                    contents[rec] = count
                else:
                    del contents[rec]
                recs.append(rec), starts.append(s[0]), times.append(t), diffs.append(d)
        self._close_ended(frontier, recs, starts, times, diffs)
        if recs:
            interner = self.interner
            ids = interner.pair(interner.int_ids(np.asarray(starts, dtype=np.int64)),
                                np.asarray(recs, dtype=np.int64))
            self.emit(Updates((ids,), np.asarray(times, dtype=np.int64).reshape(-1, 1),
                              np.asarray(diffs, dtype=np.int64)))

    def _close_ended(self, frontier: Antichain, recs, starts, times, diffs) -> None:
        """Close the sessions no event can extend any more: those ending at or before the frontier
        (all of them when it is empty; a session ending beyond int64 time never closes)."""
        ends, sessions = self.ends, self.open
        bound = T_MAX if frontier.is_empty() else frontier.elements[0][0]
        while ends and ends[0][0] <= bound:
            end, key = heapq.heappop(ends)
            s = sessions.get(key)
            if s is not None and s[1] + self.gap == end:
                self._close(key, s, recs, starts, times, diffs)

    def _close(self, key: int, s: list, recs, starts, times, diffs) -> None:
        del self.open[key]
        end = s[1] + self.gap
        for rec, count in s[2].items():
            recs.append(rec), starts.append(s[0]), times.append(end), diffs.append(-count)

    def open_records(self) -> tuple[np.ndarray, np.ndarray]:
        """``(record ids, counts)`` of the open sessions' records."""
        items = [(rec, count) for s in self.open.values() for rec, count in s[2].items()]
        return (np.asarray([r for r, _ in items], dtype=np.int64), np.asarray([c for _, c in items], dtype=np.int64))

    def held_ids(self):
        yield from super().held_ids()
        yield np.asarray(list(self.open), dtype=np.int64)  # key ids name the open sessions
        yield self.open_records()[0]


class SessionRoute(Exchange):
    """The exchange before session windows: keys go to their owner worker. What it gives a worker
    restored alone is the open sessions' records (their start and history are not kept)."""

    sessions: Sessions

    def state(self, frontier: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, counts = self.sessions.open_records()
        return ids, np.full((len(ids), 1), frontier - 1, dtype=np.int64), counts


def session_windows(collection, gap: int):
    """``(start, (key, val))``: per key, the updates of the ``(key, val)`` records of
    ``collection`` grouped into sessions, cut wherever the key has no event for ``gap``
    nanoseconds; ``start`` is the session's first event. Each record is retracted at its session's
    end, ``gap`` after the session's last event (see the module)."""
    gap = _positive("gap", gap, "session_windows")
    c = _outer(collection, "session_windows")
    route = None
    if c.context.worker is not None:  # one of several workers: keys go to their owners first
        route = SessionRoute(c.scope, by_self=False, arrangement=c.context.name_arrangement("session_windows"))
        c = c._then(route)
    node = Sessions(c.scope, gap=gap)
    if route is not None:
        route.sessions = node
    return c._then(node)
