"""Random change streams for the library tests, and the check that replays them at every complete time.

A stream is a sequence of changes to one or more inputs (a multiset of graph edges, a set of roots,
a multiset of records), each change at its own time (a few share one), never removing what is not
there, cut into epochs at increasing boundaries. :func:`check_stream` builds a dataflow, feeds the
stream epoch by epoch (each epoch in two halves, shuffled, with a ``df.run()`` after each half) and
after every run compares ``capture.at(t)`` with a plain-Python reference at every complete time
``t`` the output or the inputs move at (between two such times neither can change).

With more than one worker (``WORKERS``, which the suites' ``workers`` fixture sets: a count, or
``None`` for a count each stream picks by its seed, see ``support.workers``) the dataflow is built on
every worker of a :class:`ddflow.operators.workers.Workers`, the changes are dealt round-robin to
the workers, and the union of their captures is compared.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from support import executors
from support.workers import count_for, transport

from ddflow.operators import Dataflow
from ddflow.operators.testing import accumulate
from ddflow.operators.workers import Workers

BASES = (0, 1_700_000_000_000_000_000)  # small times and realistic nanosecond clock times
EXECUTOR: str | None = None  # the executor (set by the suites' ``executor`` fixture; None: mixed)
WORKERS: int | None = 1  # workers check_stream runs with (set by the suites' ``workers`` fixture; None: mixed)

Update = tuple[Hashable, int, int]


@dataclass
class Stream:
    """Updates per input (``{name: [(record, time, diff), ...]}``) and the epoch boundaries."""

    updates: dict[str, list[Update]]
    boundaries: list[int]
    seed: int

    def epochs(self, name: str) -> list[list[Update]]:
        """The updates of ``name`` per epoch (the last holds the updates after the last boundary)."""
        out: list[list[Update]] = [[] for _ in range(len(self.boundaries) + 1)]
        for update in self.updates[name]:
            out[sum(update[1] >= b for b in self.boundaries)].append(update)
        return out

    def __repr__(self) -> str:
        sizes = {name: len(u) for name, u in self.updates.items()}
        return f"Stream({sizes} updates, {len(self.boundaries)} boundaries, seed={self.seed}, {self.updates})"


@st.composite
def streams(
    draw: Any,
    inputs: dict[str, st.SearchStrategy[Hashable]],
    *,
    initial: int = 12,
    max_changes: int = 40,
    max_epochs: int = 8,
) -> Stream:
    """Changes to the named inputs: an initial load at the first time, then single insertions and
    removals (of a present copy) at mostly distinct increasing times, cut into epochs."""
    base = draw(st.sampled_from(BASES))
    step = draw(st.sampled_from((1, 1_000, 1_000_000)))
    names = list(inputs)
    present: dict[str, Counter] = {name: Counter() for name in names}
    updates: dict[str, list[Update]] = {name: [] for name in names}
    time = base
    for name in names:
        for record in draw(st.lists(inputs[name], max_size=initial)):
            updates[name].append((record, time, 1))
            present[name][record] += 1
    changes = draw(st.integers(0, max_changes))
    times = [time]
    for _ in range(changes):
        time += step * draw(st.sampled_from((1, 1, 1, 2, 0)))  # some changes share a time
        times.append(time)
        name = draw(st.sampled_from(names))
        have = sorted(r for r, c in present[name].items() if c > 0)
        if have and draw(st.booleans()):
            record, diff = draw(st.sampled_from(have)), -1
        else:
            record, diff = draw(inputs[name]), 1
        updates[name].append((record, time, diff))
        present[name][record] += diff
    distinct = sorted(set(times))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(distinct)), max_size=max_epochs))))
    boundaries = [distinct[c - 1] + 1 for c in cuts]
    return Stream(updates, boundaries, draw(st.integers(0, 2**32)))


def check_stream(
    stream: Stream,
    build: Callable[..., Any],
    reference: Callable[..., dict[Hashable, int]],
    *,
    extra: Callable[[dict[Hashable, int], int], None] | None = None,
) -> Dataflow:
    """Build ``build(*collections)`` (one input per stream input, in order), replay the stream and
    compare with ``reference(*snapshots)`` at every complete time; ``extra(result, t)`` may check
    more. The inputs are closed after the last epoch, which completes every time."""
    names = list(stream.updates)
    workers = count_for(WORKERS, stream.seed)
    config = executors.config(None, executors.name_for(EXECUTOR, stream.seed), stream.seed)
    if workers == 1:
        df: Any = Dataflow(config=config)
        sessions: list[Any] = [df.new_input(name) for name in names]
        probe: Any = build(*(s.collection for s in sessions)).capture()
    else:
        df = Workers(workers, lambda d: build(*(d.new_input(name).collection for name in names)).capture(),
                     config=config, transport=transport(workers, stream.seed))
        sessions = [df.input(name) for name in names]
        probe = df.capture(lambda capture: capture)
    epochs = {name: stream.epochs(name) for name in names}
    rng = random.Random(stream.seed)
    input_times = sorted({t for name in names for _, t, _ in stream.updates[name]}) or [0]
    checked: set[int] = set()
    for index in range(len(stream.boundaries) + 1):
        last = index == len(stream.boundaries)
        halves: list[list[tuple[Any, Update]]] = [[], []]
        for session, name in zip(sessions, names):
            todo = list(epochs[name][index])
            rng.shuffle(todo)
            cut = rng.randrange(len(todo) + 1)
            halves[0] += [(session, u) for u in todo[:cut]]
            halves[1] += [(session, u) for u in todo[cut:]]
        for half in halves:
            for session, (record, time, diff) in half:
                session.update(record, time, diff)
            df.run()
            _check(probe, stream, names, reference, extra, input_times, checked)
        for session in sessions:
            if last:
                session.close()
            else:
                session.advance_to(stream.boundaries[index])
        df.run()
        _check(probe, stream, names, reference, extra, input_times, checked)
    assert probe.frontier == []
    return df


def _check(probe, stream, names, reference, extra, input_times: Sequence[int], checked: set[int]) -> None:
    frontier = probe.frontier
    output_times = {t for _, t, _ in probe.updates}
    assert output_times <= set(input_times), (
        f"outputs at times {sorted(output_times - set(input_times))} where no input changed"
    )
    candidates = set(input_times) | {input_times[0] - 1}
    for t in sorted(candidates - checked):
        if frontier and not all(t < f for f in frontier):
            continue
        want = reference(*(accumulate(stream.updates[n], t) for n in names))
        got = probe.at(t)
        assert got == want, _diff(t, got, want, {n: accumulate(stream.updates[n], t) for n in names})
        if extra is not None:
            extra(got, t)
        checked.add(t)


def _diff(t: int, got: dict, want: dict, inputs: dict) -> str:
    missing = {r: c for r, c in want.items() if got.get(r) != c}
    spurious = {r: c for r, c in got.items() if want.get(r) != c}
    return f"at time {t}: missing/wrong {missing}, unexpected {spurious}; inputs {inputs}"
