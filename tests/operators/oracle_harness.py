"""Drive a pipeline through the engine and the oracle side by side, at every complete time.

A *pipeline* is a function ``f(*collections) -> collection | tuple[collection, ...]`` written
against the public ``Collection`` API; :func:`check_pipeline` builds it once in a real
``Dataflow`` (one input per :class:`ReplaySource`) and replays the sources epoch by epoch. After
every ``df.run()`` it checks, for every time that became complete (each update time, the epoch
boundaries and the times just before them, and the time before every third update time), that
``capture.at(t)`` equals the oracle's from-scratch answer at ``t``; that ``capture.updates`` is
consolidated, accumulates to the same answer and only moves at input times; that the capture's
frontier is the inputs' frontier; and that running again with nothing new changes nothing.
Each epoch is fed in two halves with a ``df.run()`` between.

With ``workers`` > 1 (default ``WORKERS``, which the suites' ``workers`` fixture sets: a count, or
``None`` for a count each example picks by its number of updates, see ``support.workers``)
the pipeline is built on every worker of a :class:`ddflow.operators.workers.Workers`, the updates
are dealt round-robin to the workers, and the union of the workers' captures must equal the oracle
at the same times.

Hypothesis strategies for the streams live here too (the settings profiles are in
``support.profiles``).
"""

from __future__ import annotations


from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import oracle
from hypothesis import strategies as st

from support import executors
from support.workers import count_for, transport

from ddflow.operators.testing import Epoch, ReplaySource, accumulate_at
from ddflow.operators.tuning import EngineConfig

EXECUTOR: str | None = None  # the executor (set by the suites' ``executor`` fixture; None: mixed)
WORKERS: int | None = 1  # workers check_pipeline runs with (set by the suites' ``workers`` fixture; None: mixed)

DIFFS = (-2, -1, 1, 2)
BASES = (0, 1_700_000_000_000_000_000)  # small times and realistic epoch-nanosecond times

# -- strategies -------------------------------------------------------------------------------

small_ints = st.integers(0, 5)
pairs = st.tuples(st.integers(0, 3), st.integers(0, 3))


@st.composite
def schedules(draw: Any, *, max_epochs: int = 20) -> tuple[int, int, list[int]]:
    """(base, width, boundaries): 1..max_epochs epochs of ``width`` ns starting at ``base``."""
    base = draw(st.sampled_from(BASES))
    # Mostly wide epochs (many distinct times each); narrow ones make updates share times.
    width = draw(st.sampled_from((1_000, 1_000_000, 1_000, 16, 1)))
    epochs = draw(st.integers(1, max_epochs))
    return base, width, [base + (e + 1) * width for e in range(epochs)]


@st.composite
def sources(
    draw: Any,
    records: st.SearchStrategy[Hashable],
    count: int = 1,
    *,
    max_epochs: int = 20,
    max_per_epoch: int = 30,
    diffs: Sequence[int] = DIFFS,
    allow_hold: bool = True,
) -> list[ReplaySource]:
    """``count`` sources sharing one epoch schedule.

    Each epoch has 0..max_per_epoch updates at times inside the epoch (mostly distinct), some of
    them retractions of earlier updates; diffs include negatives so multiplicities go negative.
    A source may hold its frontier for some epochs (lag behind the others) and may stay open.
    """
    base, width, boundaries = draw(schedules(max_epochs=max_epochs))
    result = []
    for _ in range(count):
        updates: list[tuple[Hashable, int, int]] = []
        lower = base
        # The final epoch (after the last boundary) gets updates too when the source closes.
        close = draw(st.booleans())
        uppers = boundaries + ([boundaries[-1] + width] if close else [])
        for upper in uppers:
            offsets = st.integers(0, upper - lower - 1)
            fresh = draw(
                st.lists(st.tuples(records, offsets, st.sampled_from(diffs)), max_size=max_per_epoch)
            )
            updates.extend((record, lower + offset, diff) for record, offset, diff in fresh)
            if len(updates) > 0 and draw(st.booleans()):
                earlier = draw(st.lists(st.integers(0, len(updates) - 1), max_size=5))
                for index in earlier:
                    record, _, diff = updates[index]
                    updates.append((record, lower + draw(offsets), -diff))
            lower = upper
        hold = [False] * len(boundaries)
        if allow_hold and count > 1 and len(boundaries) > 1:
            hold = draw(st.lists(st.booleans(), min_size=len(boundaries), max_size=len(boundaries)))
            hold[-1] = False
        result.append(ReplaySource(updates, boundaries, hold=hold, close=close))
    return result


# -- the check --------------------------------------------------------------------------------


def _frontier(sources_: Sequence[ReplaySource], epoch: int) -> tuple[bool, int | None]:
    """(known, F): F the inputs' frontier after ``epoch`` (None: all closed); known False while
    some open input has not advanced yet (its frontier is the engine's least time)."""
    open_frontiers = []
    for source in sources_:
        if source.closed_after(min(epoch, len(source) - 1)):
            continue
        f = source.frontier_after(epoch)
        if f is None:
            return False, None
        open_frontiers.append(f)
    return True, (min(open_frontiers) if open_frontiers else None)


def _candidate_times(sources_: Sequence[ReplaySource]) -> list[int]:
    """Every input time, every epoch boundary and the time before it, and the time before every
    third input time (outputs may only move at input times; that is checked on the updates)."""
    times: set[int] = set()
    for source in sources_:
        for i, t in enumerate(source.times()):
            times.update((t - 1, t) if i % 3 == 0 else (t,))
        for b in source.boundaries:
            times.update((b - 1, b))
    return sorted(t for t in times if t >= 0)


def check_pipeline(
    pipeline: Callable[..., Any],
    sources_: Sequence[ReplaySource],
    *,
    also: Callable[[Any, int], None] | None = None,
    config: Any = None,
    workers: int | None = None,
) -> Any:
    """Build ``pipeline`` in a Dataflow fed by ``sources_`` and compare it with the oracle.

    ``also(df, t)`` runs extra checks for each checked complete time; ``config`` is the dataflow's
    ``EngineConfig``; ``workers``: how many workers share the dataflow (default ``WORKERS``).
    Returns the Dataflow (with several workers, the first worker's).
    """
    from ddflow.operators import Dataflow
    from ddflow.operators.workers import Workers

    key = sum(len(s.updates) for s in sources_) + len(sources_)
    if workers is None:
        workers = count_for(WORKERS, key)
    if config is None or config.executor == EngineConfig().executor:  # an executor the caller did not pick
        config = executors.config(config, executors.name_for(EXECUTOR, key), key)
    else:
        config = executors.varied(config, key)

    def build(df: Any) -> list:
        sessions = [df.new_input(f"in{i}") for i in range(len(sources_))]
        result = pipeline(*(session.collection for session in sessions))
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        return [getattr(o, "collection", o).capture() for o in outputs]

    if workers == 1:
        df = Dataflow(config=config)
        probes = build(df)
        sessions = [df.inputs[f"in{i}"] for i in range(len(sources_))]
        first = df
    else:
        df = Workers(workers, build, config=config, transport=transport(workers, key))
        probes = [df.capture(lambda out, i=i: out[i]) for i in range(len(df.outputs[0]))]
        sessions = [df.input(f"in{i}") for i in range(len(sources_))]
        first = df.dataflows[0]

    candidates = _candidate_times(sources_)
    beyond = (candidates[-1] if candidates else 0) + 10**9  # checked once every input is closed
    input_times = {t for source in sources_ for t in source.times()}
    inputs_at = [accumulate_at(source.updates, candidates + [beyond]) for source in sources_]
    memo: dict[int, list[dict[Hashable, int]]] = {}

    def check_times(times: list[int], epoch: int) -> None:
        """Compare every output with the oracle at each of ``times`` (all complete)."""
        sums = [accumulate_at(probe.updates, times) for probe in probes]
        for t in times:
            if t not in memo:
                memo[t] = oracle.evaluate(pipeline, [acc[t] for acc in inputs_at])
            want = memo[t]
            for index, probe in enumerate(probes):
                got = probe.at(t)
                assert got == want[index], (
                    f"output {index} at time {t} (after epoch {epoch}):\n"
                    f"  engine: {dict(sorted(got.items(), key=repr))}\n"
                    f"  oracle: {dict(sorted(want[index].items(), key=repr))}"
                )
                assert sums[index][t] == got, f"output {index}: updates do not sum to at({t})"
            if also is not None:
                also(df, t)

    checked_upto: int | None = None  # every candidate < checked_upto has been checked
    epoch = -1
    for epoch in _feed_in_halves(df, list(zip(sessions, sources_))):
        df.run()
        known, frontier = _frontier(sources_, epoch)
        if not known:
            continue
        for probe in probes:
            assert probe.frontier == ([] if frontier is None else [frontier]), (
                f"after epoch {epoch}: capture frontier {probe.frontier}, inputs at {frontier}"
            )
        due = [
            t
            for t in candidates
            if (checked_upto is None or t >= checked_upto) and (frontier is None or t < frontier)
        ]
        check_times(due + ([beyond] if frontier is None else []), epoch)
        checked_upto = frontier
        before = [Counter(probe.updates) for probe in probes]
        df.run()  # nothing new to do: a second run changes nothing
        assert [Counter(probe.updates) for probe in probes] == before, f"re-run after epoch {epoch}"
    # Earlier complete times stay answerable and right after later epochs and compaction
    # (a sample: every epoch's last time and every 7th candidate).
    known, frontier = _frontier(sources_, epoch)
    if known:
        ends = {b - 1 for source in sources_ for b in source.boundaries}
        sample = [t for i, t in enumerate(candidates) if i % 7 == 0 or t in ends]
        check_times([t for t in sample if frontier is None or t < frontier], epoch)
    for index, probe in enumerate(probes):
        _check_consolidated(probe.updates, input_times, index)
    return first


def _feed_in_halves(df: Any, pairs: list[tuple[Any, ReplaySource]]) -> Any:
    """Feed epoch i of every source, running ``df`` once half way (updates pending, frontier
    not yet moved), and yield i. Like ``testing.lockstep`` with a run in the middle."""
    rounds = max(len(source) for _, source in pairs)
    for i in range(rounds):
        steps = [(session, source.epochs[i]) for session, source in pairs if i < len(source)]
        for session, step in steps:
            Epoch(step.updates[: len(step.updates) // 2], None, False).feed(session)
        df.run()
        for session, step in steps:
            Epoch(step.updates[len(step.updates) // 2 :], step.advance, step.close).feed(session)
        yield i


def _check_consolidated(updates: list[tuple[Any, int, int]], input_times: set[int], index: int) -> None:
    seen: set[tuple[Any, int]] = set()
    for record, time, diff in updates:
        assert isinstance(time, int), f"output {index}: time {time!r} is not an int"
        assert diff != 0, f"output {index}: zero diff for {record!r} at {time}"
        assert (record, time) not in seen, f"output {index}: ({record!r}, {time}) twice: not consolidated"
        seen.add((record, time))
        assert time in input_times, (
            f"output {index}: update {(record, time, diff)!r} at a time where no input changed"
        )
