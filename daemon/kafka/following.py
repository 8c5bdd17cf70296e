"""Following a result topic's protocol, partition by partition, into a view of final times.

Per partition a follower keeps, for each of its writers, the frontier below which that writer's
times are final, and the updates read per (incarnation, lower, upper) that are not final yet. When
writer ``w``'s marker arrives for a range reaching past ``w``'s frontier, the updates of the same
incarnation and range must number exactly ``count``; those at or beyond ``w``'s frontier become
final and it moves to ``upper``: an epoch counts once per writer however often it was written
(re-sent epochs, broker retries, records of aborted transactions). A partition's ``final`` is the
least of its writers' frontiers (``W`` writers say so in their markers' ``writers``, else one).
`_Follower` reads msgpack result topics (batches and markers on the data topic); json and debezium
outputs, whose markers are on a companion progress topic, are followed by `companion`'s followers.
`results.ResultClient` drives them from a consumer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ...operators.lattice import T_MIN
from ..exceptions import ProtocolError
from ..formats.result_protocol import OutputBatch, decode_output

__all__ = ["CLOSED", "Change", "ProtocolStats", "ReadAgain"]

CLOSED = 2**63  # internal frontier of a partition whose writer closed it (upper nil)

Update = tuple[Any, int, int]

REREADS = 3  # times a msgpack partition is read again up to one marker that finds epochs missing


class ReadAgain(ProtocolError):
    """Epochs of a writer are missing before the marker at ``at`` on ``topic[partition]``: read the
    partition again from ``start`` (raised by `_Follower`; `reading.Routes` seeks its consumer).

    A broker may deliver a partition with messages left out that a later read finds in place (the
    embedded development broker did, under several transactional writers). Reading again is exact:
    what was accepted comes as duplicates, what was pending again. Unsought, a `ProtocolError`."""

    def __init__(self, message: str, topic: str, partition: int, start: int, at: int) -> None:
        super().__init__(message)
        self.topic, self.partition, self.start, self.at = topic, partition, start, at


@dataclass(frozen=True)
class Change:
    """The topic's frontier moved to ``frontier`` (None: closed, everything is final);
    ``updates`` are the ones that became final, sorted by time."""

    frontier: int | None
    updates: list[Update]


@dataclass
class ProtocolStats:
    epochs: int = 0  # accepted (partition, range) markers
    duplicate_epochs: int = 0  # markers for ranges already final
    dropped_updates: int = 0  # updates of re-sent, duplicated or aborted epochs
    incomplete_epochs: int = 0  # markers whose count does not match what was read (ignored)
    messages: int = 0
    reread: int = 0  # partitions read again from an earlier offset after a gap (see `ReadAgain`)
    idle_rereads: int = 0  # partitions read again by a reader idle at their end (see `_View.held_back`)


@dataclass
class _Partition:
    finals: list[int] = field(default_factory=lambda: [T_MIN])  # per writer: below it, its times are final
    pending: dict[tuple[str, int, int | None], list[Update]] = field(default_factory=lambda: defaultdict(list))
    mismatch: str = ""
    counts: dict[tuple[str, int, int | None], int] = field(default_factory=dict)  # data messages (companion)
    waiting: list[Any] = field(default_factory=list)  # (marker, its progress offset) waiting for data (companion)
    writer_of: dict[str, int] = field(default_factory=dict)  # incarnation -> writer, from its markers
    began: int | None = None  # the offset reading was assigned to begin at (`_View.reading_from`)
    first: int | None = None  # offset of the first message read
    marked_at: dict[int, int] = field(default_factory=dict)  # writer -> offset of its last accepted marker
    # (a json/debezium output's: of the last data message of its last accepted epoch that had any)
    data_at: dict[tuple[str, int, int | None], int] = field(default_factory=dict)  # epoch -> its last data offset
    progress: int | None = None  # the progress-topic partition the markers of this partition come on
    progress_marks: dict[int, int] = field(default_factory=dict)  # writer -> offset there of its last accepted one
    reread: dict[int, int] = field(default_factory=dict)  # offset of a marker that found a gap -> times read again
    rows: dict[bytes | None, Any] = field(default_factory=dict)  # an upsert output's row per key (final)

    @property
    def final(self) -> int:
        """Every time below it is final: the least of the writers' frontiers."""
        return min(self.finals)

    @final.setter
    def final(self, value: int) -> None:  # a partition with one writer (what a checkpoint recorded)
        self.finals = [value] * len(self.finals)

    def writer_final(self, writer: int) -> int:
        """Writer ``writer``'s frontier (T_MIN before any marker of it)."""
        return self.finals[writer] if writer < len(self.finals) else T_MIN

    def set_writer_final(self, writer: int, value: int) -> None:
        self.writers(writer + 1)
        self.finals[writer] = value

    def writers(self, count: int) -> None:
        """The partition has (at least) ``count`` writers: a new writer starts at T_MIN."""
        if count > len(self.finals):
            self.finals.extend([T_MIN] * (count - len(self.finals)))


class _View:
    """The final frontier over partitions and the view accumulated below it (no I/O)."""

    def __init__(self, topic: str, partitions: int, *, keep_view: bool, stats: ProtocolStats) -> None:
        self.topic = topic
        self.keep_view = keep_view
        self.stats = stats
        self.partitions = [_Partition() for _ in range(partitions)]
        self.staged: list[Update] = []
        self.view: dict[Any, int] = {}
        self.frontier = T_MIN
        self.only: int | None = None  # follow only this writer (a sink resuming as one writer of several)

    def _other(self, state: _Partition, incarnation: str) -> bool:
        """Whether ``incarnation`` is a writer's this follower does not follow (see ``only``)."""
        writer = state.writer_of.get(incarnation)
        return self.only is not None and writer is not None and writer != self.only

    def topics(self) -> dict[str, int]:
        """The topics this follower reads, with their partition counts."""
        return {self.topic: len(self.partitions)}

    def take(self, topic: str, partition: int, offset: int, value: bytes | None, headers: Any,
             key: bytes | None = None) -> Change | None:
        """Apply one message (value, headers, key) of one of `topics`; a Change when it moved the frontier."""
        raise NotImplementedError

    def reading_from(self, topic: str, partition: int, offset: int) -> None:
        """The consumer reads ``topic[partition]`` from ``offset``: reading again for a writer with no
        accepted marker starts there, not at the first message delivered (those before may have
        been left out)."""
        if topic == self.topic:
            self.partitions[partition].began = offset

    def held_back(self) -> list[tuple[str, int, int]]:
        """``(topic, partition, start)`` per partition holding the frontier back, with where to read it
        again from: a reader idle at its end reads them again (calling `reading_again`), since a
        writer's last epochs left out by the broker show no gap."""
        raise NotImplementedError

    def reading_again(self, topic: str, partition: int) -> None:
        """``topic[partition]`` is read again from a `held_back` start: what is pending comes again."""
        if topic != self.topic:
            return
        state = self.partitions[partition]
        for key in list(state.pending):
            self.stats.dropped_updates += len(state.pending.pop(key))
        state.counts.clear()
        state.data_at.clear()
        state.mismatch = ""

    def _again_from(self, state: _Partition, offset: int | None) -> int:
        """Just after the oldest of the followed writers' last accepted markers (or where reading
        began: the assigned offset, else the first message read, else ``offset``): where
        ``state``'s partition is read again."""
        began = state.began if state.began is not None else state.first if state.first is not None else offset
        assert began is not None
        return min(state.marked_at.get(w, began - 1) for w in self._followed(state)) + 1

    def _followed(self, state: _Partition) -> range | list[int]:
        """The writers of ``state``'s partition this follower follows."""
        return range(len(state.finals)) if self.only is None else [self.only]

    def _advance(self) -> Change | None:
        frontier = min(p.final for p in self.partitions)
        if frontier <= self.frontier:
            return None
        self.frontier = frontier
        final = [u for u in self.staged if u[1] < frontier]
        self.staged = [u for u in self.staged if u[1] >= frontier] if len(final) < len(self.staged) else []
        final.sort(key=lambda u: u[1])
        if self.keep_view:
            view = self.view
            for record, _, diff in final:
                count = view.get(record, 0) + diff
                if count:
                    view[record] = count
                else:
                    del view[record]
        return Change(None if frontier >= CLOSED else frontier, final)

    def _accept(self, state: _Partition, found: list[Update], lower: int, upper: int, where: str,
                writer: int = 0) -> None:
        """A complete epoch ``[lower, upper)`` of ``found`` updates from ``writer``: stage those at
        times it had not made final yet, move its frontier to ``upper`` and drop what is pending
        below it (its own attempts, and anything below every writer's frontier)."""
        fresh = []
        own = state.writer_final(writer)
        for update in found:
            if not lower <= update[1] < upper:
                raise ProtocolError(f"{where}: update {update!r:.120} has a time outside the epoch")
            if update[1] >= own:
                fresh.append(update)
            else:
                self.stats.dropped_updates += 1
        state.set_writer_final(writer, upper)
        state.mismatch = ""
        self.stats.epochs += 1
        self.staged.extend(fresh)
        every = state.final
        for stale in [k for k in state.pending if (CLOSED if k[2] is None else k[2]) <= every or (
                state.writer_of.get(k[0]) == writer and (CLOSED if k[2] is None else k[2]) <= upper)]:
            self.stats.dropped_updates += len(state.pending.pop(stale))
            state.counts.pop(stale, None)

    @staticmethod
    def _writer(state: _Partition, incarnation: str, writer: int, writers: int, where: str) -> int:
        """Learn who wrote ``incarnation`` (one incarnation is one writer's)."""
        state.writers(writers)
        known = state.writer_of.setdefault(incarnation, writer)
        if known != writer:
            raise ProtocolError(f"{where}: incarnation {incarnation} marked as writer {writer}, before as {known}")
        return writer


class _Follower(_View):
    """The protocol state machine of one msgpack result topic (no I/O)."""

    def take(self, topic: str, partition: int, offset: int, value: bytes | None, headers: Any,
             key: bytes | None = None) -> Change | None:
        return self.apply(partition, offset, value)

    def apply(self, partition: int, offset: int, value: bytes | None) -> Change | None:
        """Apply one message; a Change when it moved the topic's frontier."""
        self.stats.messages += 1
        try:
            msg = decode_output(value)
        except Exception as exc:
            raise ProtocolError(f"{self.topic}[{partition}] offset {offset}: {exc}") from exc
        state = self.partitions[partition]
        if state.first is None:
            state.first = offset
        upper = CLOSED if msg.upper is None else msg.upper
        key = (msg.incarnation, msg.lower, msg.upper)
        if isinstance(msg, OutputBatch):
            if upper <= state.final or self._other(state, msg.incarnation):
                self.stats.dropped_updates += len(msg.updates)
            else:
                state.pending[key].extend(msg.updates)
            return None
        found = state.pending.pop(key, [])
        where = f"{self.topic}[{partition}] offset {offset}: epoch [{msg.lower}, {msg.upper}) of incarnation {msg.incarnation}"
        writer = self._writer(state, msg.incarnation, msg.writer, msg.writers, where)
        if self._other(state, msg.incarnation):
            self.stats.dropped_updates += len(found)
            return None
        final = state.writer_final(writer)
        if upper <= final:
            self.stats.duplicate_epochs += 1
            self.stats.dropped_updates += len(found)
            return None
        if msg.lower > final:
            missing = (f"{where} starts after the final frontier {final}"
                       + (f" of writer {writer}" if msg.writers > 1 else "") + ": epochs are missing"
                       + (f" (the last one seen was not complete: {state.mismatch})" if state.mismatch else ""))
            raise self._read_again(state, partition, offset, missing)
        if len(found) != msg.count:
            # not this attempt's records alone (e.g. an aborted attempt of the same incarnation is
            # visible): ignore it and wait for a re-sent epoch; a gap after it raises above
            state.mismatch = f"{where}: the marker counts {msg.count} updates, the topic holds {len(found)}"
            self.stats.incomplete_epochs += 1
            self.stats.dropped_updates += len(found)
            return None
        self._accept(state, found, msg.lower, upper, where, writer)
        state.marked_at[writer] = offset
        return self._advance()

    def _read_again(self, state: _Partition, partition: int, offset: int, missing: str) -> ProtocolError:
        """A marker at ``offset`` found a writer's epochs missing: the error to raise, `ReadAgain`
        from `_again_from` (what is pending is dropped, to be read again), or a plain
        `ProtocolError` once the partition was read again ``REREADS`` times up to this marker."""
        tries = state.reread.get(offset, 0)
        if tries >= REREADS:
            return ProtocolError(f"{missing}; read again {tries} times from before it")
        state.reread[offset] = tries + 1
        self.stats.reread += 1
        self.reading_again(self.topic, partition)
        return ReadAgain(missing, self.topic, partition, self._again_from(state, offset), offset)

    def held_back(self) -> list[tuple[str, int, int]]:
        if self.frontier >= CLOSED:
            return []
        return [(self.topic, p, self._again_from(state, state.first)) for p, state in enumerate(self.partitions)
                if (state.first is not None or state.began is not None) and state.final <= self.frontier]
