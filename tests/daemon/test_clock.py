"""The common epoch clock: every worker computes the same boundary from the same votes; a worker
starts an agreement when its own view says an epoch could close, joins one another worker started,
and does not start the same proposal again before ``retry`` seconds."""

from __future__ import annotations

from ddflow.daemon.cluster.clock import Decision, EpochClock, decide
from ddflow.daemon.input.progress import EpochPolicy

FIXED = EpochPolicy(resolution_ns=10)
vote = EpochClock.vote


def test_the_upper_is_the_policy_at_the_meet_of_the_holders_frontiers():
    assert decide([vote(57, True, 3, 0.1), vote(43, True, 0, 0.0)], 0, FIXED) == Decision(40)
    assert decide([vote(57, True, 3, 0.1), vote(None, False, 0, 0.0)], 0, FIXED) == Decision(50)  # holds nothing
    assert decide([vote(57, True, 3, 0.1), vote(None, True, 0, 0.0)], 0, FIXED) == Decision(None)  # knows nothing yet
    assert decide([vote(57, True, 3, 0.1), vote(43, True, 0, 0.0)], 40, FIXED) == Decision(None)  # nothing new


def test_a_full_epoch_or_a_stopping_worker_closes_at_the_meet_off_the_grid():
    assert decide([vote(57, True, 3, 0.1, full=True), vote(45, True, 0, 0.0)], 40, FIXED) == Decision(45)
    assert decide([vote(57, True, 3, 0.1), vote(45, True, 0, 0.0, stopping=True)], 40, FIXED) == Decision(45, (1,))
    assert decide([vote(40, True, 3, 0.1), vote(45, True, 0, 0.0, stopping=True)], 40, FIXED) == Decision(None, (1,))


def test_variable_epochs_count_every_workers_records_and_the_longest_wait():
    policy = EpochPolicy(resolution_ns=None, max_records=10, deadline_s=1.0)
    assert decide([vote(70, True, 6, 0.2), vote(90, True, 3, 0.3)], 0, policy) == Decision(None)
    assert decide([vote(70, True, 6, 0.2), vote(90, True, 4, 0.3)], 0, policy) == Decision(70)
    assert decide([vote(70, True, 0, 1.5), vote(90, True, 0, 0.3)], 0, policy) == Decision(70)


class Peers:
    """The other workers: an agreement returns their votes; ``started`` says whether one voted."""

    def __init__(self, others):
        self.others = others
        self.started = False
        self.seq = 0
        self.votes = []

    def agree(self, mine):
        self.votes.append(mine)
        self.seq += 1
        self.started = False
        return [mine, *self.others]


def clock(peers, now):
    return EpochClock(FIXED, agree=peers.agree, seq=lambda: peers.seq, voted=lambda seq: peers.started, retry=1.0,
                      monotonic=lambda: now[0])


def test_a_worker_starts_when_it_would_close_and_retries_only_after_a_change_or_retry_seconds():
    now = [0.0]
    peers = Peers([vote(35, True, 0, 0.0)])
    c = clock(peers, now)
    assert c.next_upper(0, vote(25, True, 1, 0.0)) == Decision(20)  # it would close: it starts
    assert c.next_upper(20, vote(25, True, 0, 0.0)) is None  # nothing to close, nobody started one
    assert c.next_upper(20, vote(37, True, 2, 0.0)) == Decision(30)
    peers.others = [vote(31, True, 0, 0.0)]  # the others lag: nothing closes
    assert c.next_upper(30, vote(47, True, 2, 0.0)) == Decision(None)
    assert c.next_upper(30, vote(47, True, 2, 0.0)) is None  # the same proposal: not again at once
    now[0] = 1.5
    assert c.next_upper(30, vote(47, True, 2, 0.0)) == Decision(None)  # ... but after retry seconds
    assert c.next_upper(30, vote(48, True, 2, 0.0)) == Decision(None)  # a changed frontier at once
    assert (c.agreements, c.started) == (5, 5)


def test_a_worker_with_nothing_to_do_joins_an_agreement_another_started():
    now = [0.0]
    peers = Peers([vote(50, True, 5, 0.0)])
    c = clock(peers, now)
    assert c.next_upper(0, vote(None, False, 0, 0.0)) is None
    peers.started = True
    assert c.next_upper(0, vote(None, False, 0, 0.0)) == Decision(50)
    assert (c.agreements, c.started) == (1, 0)
