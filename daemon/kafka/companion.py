"""Following json and debezium outputs: change events on the data topic, markers on a companion
progress topic (shared by several outputs, each marker naming its data topic and partition).

`_CompanionFollower` accepts a writer's epoch on a data partition once its marker is read and
exactly its ``count`` data messages are; `_UpsertFollower` follows a json output in ``mode =
"upsert"`` (the row per message key, a tombstone when it leaves), each accepted epoch's rows turned
into updates against the table as of the previous one. A reader idle at its end with the frontier
held back reads again the progress partitions the held-back partitions' markers come on and the
data partitions where a marker waits for its data (`_CompanionFollower.held_back`): a broker that
left out a data message or a marker shows no gap.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import ProtocolError, WireError
from ..formats.epochs import output_json, read_epoch_header, read_marker
from ..formats.rows import record_from_row
from .following import CLOSED, Change, ProtocolStats, Update, _Partition, _View

__all__: list[str] = []


class _CompanionFollower(_View):
    """The protocol of a json/debezium output: change events on the data topic, markers on a
    companion progress topic (shared by several outputs, each marker naming its data topic).

    A marker for ``[lower, upper)`` of an incarnation on data partition ``p`` is accepted once
    ``lower`` is at or behind ``p``'s final frontier (earlier epochs first) and exactly ``count``
    data messages of that incarnation and range have been read on ``p``; more than ``count``
    makes it incomplete (dropped, as on a msgpack topic). Markers of ranges already final and
    data of such ranges are dropped."""

    def __init__(self, topic: str, partitions: int, progress_topic: str, progress_partitions: int, reader: Any,
                 *, keep_view: bool, stats: ProtocolStats) -> None:
        super().__init__(topic, partitions, keep_view=keep_view, stats=stats)
        self.progress_topic = progress_topic
        self.progress_partitions = progress_partitions
        self.reader = reader
        self.progress_began: dict[int, int] = {}  # per progress partition: the offset reading began at

    def reading_from(self, topic: str, partition: int, offset: int) -> None:
        if topic == self.progress_topic:
            self.progress_began[partition] = offset
        super().reading_from(topic, partition, offset)

    def held_back(self) -> list[tuple[str, int, int]]:
        """Each data partition holding the frontier back where a marker waits for its data, from just
        after the last data message of the oldest of its writers' last accepted epochs (or where
        reading began), and the progress partition its markers come on, from just after the oldest
        of its writers' last accepted markers there (every progress partition from where reading
        began while data but no marker of the data partition was read: which one its markers come
        on is not known yet). A data partition no marker waits on is not read again: a writer whose
        epochs left it no data says nothing of where its next data will be."""
        if self.frontier >= CLOSED:
            return []
        again: list[tuple[str, int, int]] = []
        progress: dict[int, int] = {}
        for p, state in enumerate(self.partitions):
            if state.final > self.frontier:
                continue
            if state.waiting and (state.first is not None or state.began is not None):  # a marker waits for
                again.append((self.topic, p, self._again_from(state, state.first)))  # data left out
            marks = [state.progress_marks.get(w) for w in self._followed(state)]
            if state.progress is not None and None not in marks:
                starts = [(state.progress, min(m for m in marks if m is not None) + 1)]
            elif state.progress is not None:
                starts = [(state.progress, self.progress_began.get(state.progress, 0))]
            else:  # data read, no marker for it read yet: each progress partition may hold it
                starts = [(q, self.progress_began.get(q, 0)) for q in range(self.progress_partitions)
                          if state.first is not None]
            for q, start in starts:
                progress[q] = min(start, progress.get(q, start))
        return again + [(self.progress_topic, q, start) for q, start in sorted(progress.items())]

    def topics(self) -> dict[str, int]:
        return {self.topic: len(self.partitions), self.progress_topic: self.progress_partitions}

    def take(self, topic: str, partition: int, offset: int, value: bytes | None, headers: Any,
             key: bytes | None = None) -> Change | None:
        self.stats.messages += 1
        where = f"{topic}[{partition}] offset {offset}"
        try:
            if topic == self.progress_topic:
                marker = read_marker(value)
                if marker.topic != self.topic:
                    return None  # another output's marker on a shared progress topic
                if not 0 <= marker.partition < len(self.partitions):
                    raise WireError(f"partition {marker.partition} is not one of {self.topic}'s "
                                    f"{len(self.partitions)} partitions")
                state = self.partitions[marker.partition]
                state.waiting.append((marker, offset))  # with its offset on the progress partition
                state.progress = partition
                return self._settle(marker.partition)
            epoch = read_epoch_header(headers)
            updates = self._read(value, key)
        except WireError as exc:
            raise ProtocolError(f"{where}: {exc}") from exc
        state = self.partitions[partition]
        if state.first is None:
            state.first = offset
        if (CLOSED if epoch[2] is None else epoch[2]) <= state.final or self._other(state, epoch[0]):
            self.stats.dropped_updates += len(updates)
            return None
        state.pending[epoch].extend(updates)
        state.counts[epoch] = state.counts.get(epoch, 0) + 1
        state.data_at[epoch] = offset
        return self._settle(partition)

    def _read(self, value: bytes | None, key: bytes | None) -> list[Any]:
        """What a data message holds, kept until its epoch is accepted: its updates."""
        return self.reader.updates(value)

    def _settle(self, partition: int) -> Change | None:
        state = self.partitions[partition]
        moved = True
        accepted = False
        while moved:
            moved = False
            for waiting in list(state.waiting):
                marker, at = waiting
                upper = CLOSED if marker.upper is None else marker.upper
                key = (marker.incarnation, marker.lower, marker.upper)
                where = (f"{self.topic}[{partition}]: epoch [{marker.lower}, {marker.upper}) of incarnation "
                         f"{marker.incarnation}")
                writer = self._writer(state, marker.incarnation, marker.writer, marker.writers, where)
                final = state.writer_final(writer)
                if upper <= final or self._other(state, marker.incarnation):
                    state.waiting.remove(waiting)
                    state.counts.pop(key, None)
                    state.data_at.pop(key, None)
                    self.stats.dropped_updates += len(state.pending.pop(key, []))
                    self.stats.duplicate_epochs += upper <= final
                    continue
                seen = state.counts.get(key, 0)
                if marker.lower > final or seen < marker.count:
                    continue  # an earlier epoch is not final yet, or its data is still to be read
                state.waiting.remove(waiting)
                found = state.pending.pop(key, [])
                state.counts.pop(key, None)
                data_at = state.data_at.pop(key, None)
                if seen > marker.count:
                    state.mismatch = f"{where}: the marker counts {marker.count} messages, the topic holds {seen}"
                    self.stats.incomplete_epochs += 1
                    self.stats.dropped_updates += len(found)
                    continue
                self._accept(state, found, marker.lower, upper, where, writer)
                if data_at is not None:
                    state.marked_at[writer] = data_at
                state.progress_marks[writer] = at
                moved = accepted = True
                break
        return self._advance() if accepted else None


class _UpsertFollower(_CompanionFollower):
    """A json output in ``mode = "upsert"``: per epoch, one message per key whose row changed, keyed
    by the record's key fields, its value the row as of the epoch's end or a tombstone (null) when
    the key's row left. Markers and epochs are followed as for any json output; the messages of an
    accepted epoch become updates against the partition's table (the row per key as of the
    epoch's lower end): the key's old row retracted and its new row inserted, nothing when they are
    equal (a re-sent row changes nothing), a tombstone a retraction alone. The updates are at the
    epoch's last time (``upper - 1``): the rows are as of its end, its own times are not on the wire.
    Without ``keep_view`` (a restarting sink reading its positions) no table is kept."""

    def _read(self, value: bytes | None, key: bytes | None) -> list[Any]:
        if value is None:
            return [(key, None)]
        row = output_json(value, "an upsert output message")
        return [(key, record_from_row(row, self.reader.names, self.reader.types))]

    def _accept(self, state: _Partition, found: list[Any], lower: int, upper: int, where: str,
                writer: int = 0) -> None:
        time = upper - 1 if upper < CLOSED else max(lower, state.writer_final(writer))
        updates: list[Update] = []
        if self.keep_view:
            rows = state.rows
            for key, record in found:
                old = rows.get(key)
                if old == record:
                    continue
                if old is not None:
                    updates.append((old, time, -1))
                if record is None:
                    del rows[key]
                else:
                    rows[key] = record
                    updates.append((record, time, 1))
        super()._accept(state, updates, lower, upper, where, writer)
