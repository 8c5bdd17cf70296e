"""Oracle checks for the library's windows: tumbling, sliding and session windows.

A window's contents at a time depend on the times of the input's updates, not only on the input
accumulated then, so the oracle here evaluates from the update history: at a time ``t`` it takes
every update at a time ``<= t`` and applies the windows' definition (``ddflow.operators.nodes.windows``)
from scratch. Random streams (many distinct times per epoch, retractions, negative multiplicities,
one to three workers) are replayed epoch by epoch in two halves, and after every run each time that
became complete (input times, epoch boundaries, window ends, and the times just before them) is
checked, with a downstream reduction too (a count per window record, through an arrangement).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import oracle
import oracle_harness
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from oracle_harness import _feed_in_halves, _frontier, pairs, small_ints, sources

from support.workers import count_for, transport

from ddflow.operators import Dataflow, GraphError, ShapeError
from ddflow.operators.lattice import T_MAX, T_MIN
from ddflow.operators.library import session_windows, sliding_windows, tumbling_windows
from ddflow.operators.nodes.windows import window_starts
from ddflow.operators.testing import ReplaySource

pytestmark = pytest.mark.usefixtures("workers")  # each test with 1, 2 and 3 workers

Updates = list[tuple[Hashable, int, int]]

SIZES = (1, 3, 7, 16, 1_000, 2_500, 10_000, 1_000_000, 3_000_000)


# -- the oracle ------------------------------------------------------------------------------------
def _events(updates: Updates, t: int) -> dict[tuple[Hashable, int], int]:
    """``{(record, time): net diff}`` of the updates at times ``<= t`` (zero sums absent)."""
    net: dict[tuple[Hashable, int], int] = defaultdict(int)
    for record, u, d in updates:
        if u <= t:
            net[record, u] += d
    return {k: d for k, d in net.items() if d}


def windows_at(updates: Updates, t: int, size: int, period: int, offset: int) -> dict:
    """Sliding windows (tumbling: ``period == size``) at ``t``, by their definition: every window
    ``[s, s + size)`` with ``s = offset + k*period`` that holds ``t`` gets the updates in ``[s, t]``."""
    out: dict = defaultdict(int)
    for (record, u), d in _events(updates, t).items():
        k = (u - offset) // period
        while offset + k * period + size > u:
            start = offset + k * period
            if start + size > t:  # the window has not ended at t
                out[start, record] += d
            k -= 1
    return {r: c for r, c in out.items() if c}


def sessions_at(updates: Updates, t: int, gap: int) -> dict:
    """Session windows at ``t``: per key, the event times cut where two are ``gap`` apart or more;
    the key's last session, if it has not ended (``t < last + gap``), holds its updates."""
    by_key: dict = defaultdict(list)
    for ((key, val), u), d in _events(updates, t).items():
        by_key[key].append((u, val, d))
    out: dict = defaultdict(int)
    for key, events in by_key.items():
        times = sorted({u for u, _, _ in events})
        start = times[0]
        for before, after in zip(times, times[1:]):
            if after - before >= gap:
                start = after
        if t < times[-1] + gap:
            for u, val, d in events:
                if u >= start:
                    out[start, (key, val)] += d
    return {r: c for r, c in out.items() if c}


def window_ends(updates: Updates, size: int, period: int, offset: int) -> set[int]:
    ends = set()
    for _, u, _ in updates:
        k = (u - offset) // period
        while offset + k * period + size > u:
            ends.add(offset + k * period + size)
            k -= 1
    return ends


def session_ends(updates: Updates, gap: int) -> set[int]:
    return {u + gap for _, u, _ in updates}


# -- the check -------------------------------------------------------------------------------------
def check_windows(build: Callable, reference: Callable[[Updates, int], dict], source: ReplaySource,
                  ends: set[int]) -> None:
    """Replay ``source`` into ``build(collection)`` and compare the capture with
    ``reference(updates, t)`` at every time that became complete."""
    from ddflow.operators.workers import Workers

    workers = count_for(oracle_harness.WORKERS, len(source.updates))
    if workers == 1:
        df = Dataflow()
        probe = build(df.new_input("in0").collection).capture()
        session, runner = df.inputs["in0"], df
    else:
        runner = Workers(workers, lambda d: build(d.new_input("in0").collection).capture(),
                         transport=transport(workers, len(source.updates)))
        probe, session = runner.capture(lambda capture: capture), runner.input("in0")
    updates = list(source.updates)
    marks = {u for _, u, _ in updates} | set(source.boundaries) | ends
    candidates = sorted({m - 1 for m in marks} | marks)
    allowed = {u for _, u, _ in updates} | ends  # times at which the windows may move
    checked_upto = None
    for epoch in _feed_in_halves(runner, [(session, source)]):
        runner.run()
        known, frontier = _frontier([source], epoch)
        if not known:
            continue
        assert probe.frontier == ([] if frontier is None else [frontier]), (epoch, probe.frontier, frontier)
        due = [t for t in candidates if (checked_upto is None or t >= checked_upto)
               and (frontier is None or t < frontier)]
        if frontier is None:
            due.append(max(candidates, default=0) + 1)
        for t in due:
            want, got = reference(updates, t), probe.at(t)
            assert got == want, f"at {t} after epoch {epoch}:\n  engine {sorted(got.items(), key=repr)}\n" \
                                f"  oracle {sorted(want.items(), key=repr)}"
        checked_upto = frontier
    seen = set()
    for record, time, diff in probe.updates:
        assert diff != 0 and (record, time) not in seen and time in allowed, (record, time, diff)
        seen.add((record, time))


def _counted(reference: Callable[[Updates, int], dict]) -> Callable[[Updates, int], dict]:
    return lambda updates, t: oracle.Bag(reference(updates, t)).count().counts


sizes = st.sampled_from(SIZES)
offsets = st.integers(-3_000_000, 3_000_000)


@given(sources(small_ints, max_epochs=10, max_per_epoch=15), sizes, offsets)
def test_tumbling_windows(srcs, width, offset):
    (source,) = srcs
    check_windows(lambda c: tumbling_windows(c, width, offset=offset),
                  lambda u, t: windows_at(u, t, width, width, offset % width), source,
                  window_ends(source.updates, width, width, offset % width))


@settings(max_examples=20)
@given(sources(small_ints, max_epochs=10, max_per_epoch=15), sizes, offsets)
def test_tumbling_windows_counted(srcs, width, offset):
    """A count per window record downstream: the retractions reach an arrangement and a reduction."""
    (source,) = srcs
    check_windows(lambda c: tumbling_windows(c, width, offset=offset).map(lambda w: (w[0], w[1] % 2)).count(),
                  _counted(lambda u, t: _parity(windows_at(u, t, width, width, offset % width))),
                  source, window_ends(source.updates, width, width, offset % width))


def _parity(windows: dict) -> dict:
    out: dict = defaultdict(int)
    for (start, record), count in windows.items():
        out[start, record % 2] += count
    return {r: c for r, c in out.items() if c}


@given(sources(small_ints, max_epochs=10, max_per_epoch=12), sizes, st.integers(1, 4), offsets)
def test_sliding_windows(srcs, period, overlap, offset):
    """Windows of ``size`` = 1..4 periods (and of less than a period: gaps between windows)."""
    (source,) = srcs
    for size in (period * overlap, max(1, period // 2)) if overlap == 1 else (period * overlap,):
        check_windows(lambda c, size=size: sliding_windows(c, size, period, offset=offset),
                      lambda u, t, size=size: windows_at(u, t, size, period, offset % period), source,
                      window_ends(source.updates, size, period, offset % period))


def _gap(data, source: ReplaySource) -> int:
    """A gap from ``SIZES``, or one that some two update times of ``source`` are apart exactly."""
    times = sorted({u for _, u, _ in source.updates})
    apart = sorted({b - a for a, b in zip(times, times[1:])} | {b - a for a, b in zip(times, times[2:])})
    return data.draw(st.one_of(sizes, st.sampled_from(apart)) if apart else sizes, label="gap")


@given(sources(pairs, max_epochs=10, max_per_epoch=15), st.data())
def test_session_windows(srcs, data):
    (source,) = srcs
    gap = _gap(data, source)
    check_windows(lambda c: session_windows(c, gap), lambda u, t: sessions_at(u, t, gap), source,
                  session_ends(source.updates, gap))


@settings(max_examples=20)
@given(sources(pairs, max_epochs=10, max_per_epoch=15), st.data())
def test_session_windows_counted(srcs, data):
    """Records per session and key, through an arrangement keyed by ``(start, key)``."""
    (source,) = srcs
    gap = _gap(data, source)

    def per_session(windows: dict) -> dict:
        out: dict = defaultdict(int)
        for (start, (key, _val)), count in windows.items():
            out[start, key] += count
        return {r: c for r, c in out.items() if c}

    check_windows(lambda c: session_windows(c, gap).map(lambda w: (w[0], w[1][0])).count(),
                  _counted(lambda u, t: per_session(sessions_at(u, t, gap))), source,
                  session_ends(source.updates, gap))


# -- edges and errors ------------------------------------------------------------------------------
@given(st.lists(st.integers(T_MIN, T_MAX), max_size=20), st.sampled_from((1, 7, 10**6, T_MAX // 3, T_MAX)),
       st.sampled_from((1, 5, 10**6, T_MAX // 2, T_MAX)), st.integers(0, T_MAX))
def test_window_starts_exact_over_all_of_int64(times, size, period, offset):
    """The vectorized window starts equal the definition in exact integers, at the ends of int64."""
    import numpy as np

    assume(size // period <= 1_000)  # each time lies in about size / period windows
    offset %= period
    rows, starts = window_starts(np.asarray(times, dtype=np.int64), size, period, offset)
    got = sorted(zip(rows.tolist(), [int(s) for s in starts]))
    want = []
    for i, u in enumerate(times):
        k = (u - offset) // period
        while offset + k * period + size > u:
            want.append((i, offset + k * period))
            k -= 1
    assert got == sorted(want)


def test_windows_at_the_ends_of_time():
    """A window reaching past the largest time never ends; one starting before the least time holds
    the updates at it."""
    df = Dataflow()
    x = df.new_input("x")
    tumbling = tumbling_windows(x.collection, 10).capture()
    sliding = sliding_windows(x.collection, 30, 10).capture()
    x.update("late", T_MAX - 1, 1)
    x.update("early", T_MIN, 1)
    x.close()
    df.run()
    last = T_MAX - 1 - (T_MAX - 1) % 10
    assert sorted(tumbling.updates, key=repr) == sorted([
        ((T_MIN - T_MIN % 10, "early"), T_MIN, 1), ((T_MIN - T_MIN % 10, "early"), T_MIN - T_MIN % 10 + 10, -1),
        ((last, "late"), T_MAX - 1, 1)], key=repr)
    assert sliding.at(T_MAX) == {(last - k * 10, "late"): 1 for k in range(3)}  # they end beyond int64 time
    assert {s for (s, r), _ in sliding.at(T_MIN).items()} == {T_MIN - T_MIN % 10 - 20 + k * 10 for k in range(3)}


def test_window_errors_name_the_argument():
    df = Dataflow()
    c = df.new_input("x").collection
    with pytest.raises(GraphError, match="width"):
        tumbling_windows(c, 0)
    with pytest.raises(GraphError, match="period"):
        sliding_windows(c, 10, -1)
    with pytest.raises(GraphError, match="gap"):
        session_windows(c, 1.5)
    with pytest.raises(GraphError, match="outside iterate"):
        c.iterate(lambda v: tumbling_windows(v, 10))
    s = session_windows(c, 10).capture()
    df.inputs["x"].update("not a pair", 1, 1)
    df.inputs["x"].close()
    with pytest.raises(ShapeError, match="session_windows needs \\(key, val\\) records"):
        df.run()
    assert s.frontier != []


def test_windowed_state_stays_flat():
    """Counting tumbling windows over an input that only grows: the arrangement, the reduction and
    the retractions held follow the open windows, not the history."""
    df = Dataflow()
    x = df.new_input("x")
    counts = tumbling_windows(x.collection, 2_000).map(lambda w: (w[0], w[1] % 5)).count()
    probe = counts.capture(history=False)
    sizes = []
    for epoch in range(60):
        for i in range(50):
            x.update(epoch * 50 + i, epoch * 1_000 + i * 20, 1)
        x.advance_to((epoch + 1) * 1_000)
        df.run()
        probe.drain()
        node = next(n for n in df._all_nodes() if n.name == "tumbling_windows")
        sizes.append((sum(s["records"] for s in df.arrangement_stats().values()), len(node.held)))
    assert max(r for r, _ in sizes[10:]) <= 2 * max(r for r, _ in sizes[:10])
    assert max(h for _, h in sizes) <= 100


def test_docs_windows_example_runs_as_written():
    from support.docs import example

    exec(compile(example("windows", "python"), "docs/dataflows.md", "exec"), {})
