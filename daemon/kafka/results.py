"""The result-topic client: follow the output protocol, keep the accumulated collection.

A result topic holds, per partition, batches of updates naming their epoch ``[lower, upper)``
and writer incarnation, and progress markers ``(lower, upper, incarnation, count)`` (see `formats.result_protocol`
and `sink`); a topic written by ``W`` workers has every partition marked by each of them, and a
range is final once all ``W`` writers marked it. The client follows that protocol per partition (`following`): an epoch counts once
however often it was written; re-sent epochs, broker retries, and records of aborted transactions
(shown by brokers that do not hide them) are dropped - the latter never get a marker of their own,
or carry exactly the deterministic output when they do.

The client reads uncommitted records: the protocol needs no more (an aborted epoch is dropped, or
carries the deterministic output its re-sent epoch will), and it does not wait on the broker's
bookkeeping of open transactions. That bookkeeping can fail: the embedded broker was seen to hold
back committed transactions of a producer killed in an open one from every ``read_committed``
consumer for more than a minute, although it served them to ``read_uncommitted`` ones.

The topic's frontier is the minimum over partitions. `view` is the collection accumulated over
every time below it; only complete times are ever visible. `poll` returns a `Change` each time
the frontier moves, with the updates that became final; `changes()` iterates them live.

Outputs in the json and debezium formats keep their markers on a companion progress topic (see
`formats.rows`): each data message names its epoch and incarnation in a header, and a marker
names its data partition and the number of data messages. The client reads both topics; as the
two are not read in step, a marker waits until that many data messages of its incarnation and
range have been read (`_CompanionFollower`), then the same rules apply. A json output in ``mode =
"upsert"`` is a table (the row per message key, a tombstone when a key leaves): the client keeps
the row per key and applies an epoch's rows once its marker accepts it, each as a retraction of the
key's old row and an insertion of its new one (`_UpsertFollower`), so `view` and each `Change`
read as for any output.

Reading is done by `reading` (one consumer, messages routed to their followers); what a
restarting daemon reads of its result topics is in `positions` (`read_result_positions`,
re-exported here with `read_final_frontiers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer

from ..exceptions import KafkaClientError, OptionsError
from .following import CLOSED, Change, ProtocolStats, _Follower, _View
from .positions import read_final_frontiers, read_result_positions
from .reading import IDLE_REREAD_S, Routes, assign, catch_up, consumer_config, follower_of, messages, read_once

__all__ = ["Change", "ResultClient", "read_final_frontiers", "read_result_positions", "CLOSED"]


class ResultClient:
    """Consume a result topic from the beginning and maintain the final accumulated view.

    ``format``: the output's format; a ``json`` or ``debezium`` output also needs its
    ``progress_topic``, and ``fields`` (the output's field names, or name -> type to read
    ``bytes`` fields back from base64) gives the order of a record's values (default: each row's
    own order). A record with one field is its value, with several a tuple. ``mode``: a json
    output's ``changelog`` (the default) or ``upsert``. ``idle_reread``: seconds at the end of every
    partition, the frontier held back, before a msgpack topic's partitions holding it back are read
    again (doubling while nothing moves; see `reading.Routes.idle`)."""

    def __init__(
        self,
        topic: str,
        kafka_options: Mapping[str, Any],
        *,
        format: str = "msgpack",
        progress_topic: str | None = None,
        fields: Sequence[str] | Mapping[str, str] | None = None,
        consumer_options: Mapping[str, Any] | None = None,
        keep_view: bool = True,
        mode: str = "changelog",
        idle_reread: float = IDLE_REREAD_S,
    ) -> None:
        from ..formats import FORMATS

        if format not in FORMATS:
            raise OptionsError(f"result client format: {format!r} is not one of {', '.join(FORMATS)}")
        self.topic = topic
        self.format = format
        self.progress_topic = progress_topic
        self.fields = fields
        self.mode = mode
        self.keep_view = keep_view
        self.idle_reread = idle_reread
        self._kafka_options = dict(kafka_options)
        self._config = consumer_config(kafka_options, consumer_options, isolation="read_uncommitted")
        self._consumer: Consumer | None = None
        self.stats = ProtocolStats()
        self._follower: _View = _Follower(topic, 0, keep_view=keep_view, stats=self.stats)
        self._routes = Routes([])

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> ResultClient:
        self._follower = follower_of(self.topic, self._kafka_options, format=self.format,
                                   progress_topic=self.progress_topic, fields=self.fields, keep_view=self.keep_view,
                                   stats=self.stats, mode=self.mode)
        self._routes = Routes([self._follower], self.idle_reread)
        self._consumer = Consumer(self._config)
        assign(self._consumer, self._routes)
        return self

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def __enter__(self) -> ResultClient:
        return self.open() if self._consumer is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state -------------------------------------------------------------------------------------

    @property
    def frontier(self) -> int | None:
        """Every time below it is final (None: the topic is closed, everything is final)."""
        f = self._follower.frontier
        return None if f >= CLOSED else f

    @property
    def closed(self) -> bool:
        return self._follower.frontier >= CLOSED

    @property
    def partition_frontiers(self) -> list[int | None]:
        return [None if p.final >= CLOSED else p.final for p in self._follower.partitions]

    @property
    def view(self) -> dict[Any, int]:
        """The collection accumulated over every final time: record -> multiplicity (non-zero)."""
        return dict(self._follower.view)

    # -- reading -----------------------------------------------------------------------------------

    def _require(self) -> Consumer:
        if self._consumer is None:
            raise KafkaClientError(f"result client for {self.topic!r}: not open (use it as a context manager)")
        return self._consumer

    def poll(self, timeout: float = 0.1, *, max_messages: int = 10_000) -> list[Change]:
        """Read what is available (waiting up to ``timeout``); one Change per frontier move."""
        return read_once(self._require(), self._routes, timeout, max_messages)[0]

    def catch_up(self, timeout: float = 30.0) -> None:
        """Read until every partition is at its end; KafkaClientError after ``timeout`` seconds without
        a message."""
        catch_up(self._require(), self._routes, timeout)

    def wait_for(self, frontier: int | None, timeout: float = 30.0) -> bool:
        """Poll until the frontier reaches ``frontier`` (None: until closed); False on timeout."""
        target = CLOSED if frontier is None else frontier
        deadline = time.monotonic() + timeout
        while self._follower.frontier < target:
            if time.monotonic() > deadline:
                return False
            self.poll(0.05)
        return True

    def changes(self, *, timeout: float | None = None, poll_timeout: float = 0.05) -> Iterator[Change]:
        """Iterate changes live; stops when the topic is closed or ``timeout`` seconds pass.
        While a Change is being handled, `view` is the view at its frontier."""
        consumer = self._require()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.closed and (deadline is None or time.monotonic() < deadline):
            yield from self._changes_one_by_one(consumer, poll_timeout)

    def _changes_one_by_one(self, consumer: Consumer, timeout: float) -> Iterator[Change]:
        # apply message by message so the view matches each Change when it is yielded
        for msg in messages(consumer, self._routes, timeout, 10_000):
            yield from self._routes.take(msg)
