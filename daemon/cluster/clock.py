"""The common epoch clock of ``W`` workers: every worker closes the same epochs.

Each worker reads its share of the input partitions, so each knows only its own input frontier.
An epoch may close at ``upper`` only once every worker's frontier is at or beyond it, and every
worker must then advance its inputs to that same ``upper`` and run its dataflow once (a run is a
step of the common clock: the workers' exchanges and agreements pair up). So the workers agree on
each boundary (`EpochClock.next_upper`), through the transport's agreements (``gather``), which are
numbered alike on every worker:

* a worker *starts* an agreement when its own view says an epoch could close (its epoch policy
  fires on its input frontier, its epoch is full, or it is stopping) - at most once per
  ``retry`` seconds while nothing changed in what it would say; every other worker *joins* an
  agreement as soon as it sees a vote for the next number, whether it has anything to do or not;
* each gives its vote (`vote`): its input frontier (or that it holds no input partition, and so
  holds nothing back), its updates and wall time since the epoch opened, whether its epoch is
  full, whether it stops, whether a checkpoint of it is due;
* every worker computes the same `decide` from the same votes: the epoch policy applied to the
  meet of the frontiers, the sum of the records and the longest time open; a full epoch or a
  stopping worker closes at the meet itself. ``None``: no epoch closes. An epoch that closes where
  some worker said a checkpoint is due is checkpointed by every worker (``Decision.checkpoint``;
  when a worker stops and no epoch closes, the frontier they are at): so the workers' checkpoints
  are taken at the same frontiers.

Replays decide alike: a restarted worker re-reading the agreements takes every one as first decided
(its own earlier votes included), and closes each agreed epoch once its own inputs have caught up
with it (see `cluster.ClusterWorker`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..input.progress import EpochPolicy

__all__ = ["Decision", "EpochClock", "decide"]

# a vote: [input frontier or None, holds partitions, records, seconds open, full, stopping, checkpoint due]
Vote = list


@dataclass(frozen=True)
class Decision:
    """An agreement's outcome: the epoch closes at ``upper`` (None: it stays open); ``stopping``:
    the workers that said they stop (they leave after this epoch); ``checkpoint``: every worker
    checkpoints the epoch closing at ``upper`` (some worker said one is due), or, when none closes
    and a worker stops, the frontier they are at."""

    upper: int | None
    stopping: tuple[int, ...] = ()
    checkpoint: bool = False


def decide(votes: Sequence[Vote], current: int, policy: EpochPolicy) -> Decision:
    """The boundary every worker computes from the same ``votes`` (``current``: the open epoch's
    lower, the same everywhere)."""
    held = [v[0] for v in votes if v[1]]
    frontier = None if not held or any(f is None for f in held) else min(held)
    records = sum(int(v[2]) for v in votes)
    opened = max(float(v[3]) for v in votes)
    full = any(v[4] for v in votes)
    stopping = tuple(i for i, v in enumerate(votes) if v[5])
    upper = policy.next_upper(frontier, current, records, opened)
    if upper is None and (full or stopping) and frontier is not None and frontier > current:
        upper = frontier
    due = any(len(v) > 6 and v[6] for v in votes)  # (a vote of an older worker has no such flag)
    return Decision(upper, stopping, due and (upper is not None or bool(stopping)))


class EpochClock:
    """One worker's side of the common clock: ``agree(vote) -> votes`` makes the next agreement
    (numbered ``seq()``), ``voted(seq)`` tells whether some worker started agreement ``seq``."""

    def __init__(self, policy: EpochPolicy, *, agree: Callable[[Vote], list[Vote]], seq: Callable[[], int],
                 voted: Callable[[int], bool], retry: float = 0.1,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._agree, self._seq, self._voted = agree, seq, voted
        self.retry = retry
        self._monotonic = monotonic
        self._last: tuple[Any, ...] | None = None  # what this worker said when it last started one
        self._last_at = -float("inf")
        self.agreements = 0  # agreements this worker took part in
        self.started = 0  # ... of which it started

    @staticmethod
    def vote(frontier: int | None, holds: bool, records: int, opened_for: float, *, full: bool = False,
             stopping: bool = False, checkpoint: bool = False) -> Vote:
        return [frontier, bool(holds), int(records), round(float(opened_for), 6), bool(full), bool(stopping),
                bool(checkpoint)]

    def wants(self, vote: Vote, current: int) -> bool:
        """Whether this worker alone would close an epoch now (so it starts an agreement)."""
        frontier, holds = vote[0], vote[1]
        if vote[5]:
            return True
        if not holds or frontier is None or frontier <= current:
            return False
        return vote[4] or self.policy.next_upper(frontier, current, vote[2], vote[3]) is not None

    def next_upper(self, current: int, vote: Vote) -> Decision | None:
        """Start or join the next agreement if due (see the module): its decision, or None when
        there was none to make now."""
        now = self._monotonic()
        said = (vote[0], vote[4], vote[5])
        start = self.wants(vote, current) and (said != self._last or now - self._last_at >= self.retry)
        if not start and not self._voted(self._seq()):
            return None
        if start:
            self._last, self._last_at = said, now
            self.started += 1
        votes = self._agree(vote)
        self.agreements += 1
        decision = decide(votes, current, self.policy)
        if decision.upper is not None:
            self._last = None  # an epoch closed: the next proposal is new whatever it says
        return decision
