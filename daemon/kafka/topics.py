"""Watching the daemon's topics while it runs: vanished, recreated or re-partitioned topics stop it.

A worker's state is tied to its topics: the offsets it read and committed on the inputs, what it
published on the outputs. When a broker loses its data (a restarted in-memory broker, a topic
deleted and recreated by an operator) the topics come back empty, or recreated by other clients
with other partition counts (ddflow's own clients never let the broker auto-create one, see
`client`), and a consumer simply polls the empty partitions: nothing fails, nothing is logged. `TopicWatch` notes each topic's identity (its topic id, where the broker reports one, and
its partition count) when the worker opens, describes the topics again every ``interval`` seconds
from a thread of its own (describing never auto-creates a topic), and records the first difference as ``problem``: the worker raises it as `TopicChanged`.

A broker that does not answer is not a change: a round that times out is skipped (the data path's
own bounded calls fail if the broker stays away).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from .client import client_config

__all__ = ["TopicWatch", "TopicIdentity"]

log = logging.getLogger("ddflow.daemon.kafka.topics")

_UNKNOWN_TOPIC = 3  # Kafka error code UNKNOWN_TOPIC_OR_PARTITION


@dataclass(frozen=True)
class TopicIdentity:
    """What identifies a topic's data: its id (None if the broker reports none) and partitions."""

    topic_id: str | None
    partitions: int


class TopicWatch:
    """Compare the daemon's topics with what they were at start, every ``interval`` seconds.

    ``topics`` maps each topic to its role in the daemon (``"input 'edges'"``), used in the message.
    ``problem`` is None until a topic vanished, was recreated or changed its partition count; then
    it says which and how, and the watch stops. Use ``start()`` / ``close()``, or ``check()`` for
    one synchronous round (tests).
    """

    def __init__(self, kafka_options: Mapping[str, Any], topics: Mapping[str, str], *, interval: float = 5.0,
                 timeout: float = 10.0) -> None:
        self.topics = dict(topics)
        self.interval = interval
        self.timeout = timeout
        self.problem: str | None = None
        self.baseline: dict[str, TopicIdentity] = {}
        self._admin = AdminClient(client_config(kafka_options, {}, who="topic watch"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def describe(self) -> dict[str, TopicIdentity | None] | None:
        """Each topic's identity now (None: the topic does not exist); None if the broker did not answer."""
        try:
            futures = self._admin.describe_topics(TopicCollection(list(self.topics)),
                                                  request_timeout=self.timeout)
        except KafkaException as exc:
            log.debug("describing topics: %s", exc)
            return None
        found: dict[str, TopicIdentity | None] = {}
        for topic, future in futures.items():
            try:
                description = future.result(self.timeout + 1)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is not None and getattr(error, "code", lambda: None)() == _UNKNOWN_TOPIC:
                    found[topic] = None
                    continue
                log.debug("describing topic %s: %s", topic, exc)
                return None
            except Exception as exc:  # a future that timed out
                log.debug("describing topic %s: %s", topic, exc)
                return None
            topic_id = getattr(description, "topic_id", None)
            found[topic] = TopicIdentity(None if topic_id is None else str(topic_id), len(description.partitions))
        return found

    def start(self) -> TopicWatch:
        """Record the baseline and start watching (a topic that cannot be described now gets its
        baseline on the first round that describes it)."""
        now = self.describe()
        if now is not None:
            self.baseline = {t: ident for t, ident in now.items() if ident is not None}
        self._thread = threading.Thread(target=self._run, name="ddflow-topic-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.check() is not None:
                return

    def check(self) -> str | None:
        """One round: describe the topics, compare, and return (and keep) the first problem found."""
        if self.problem is not None:
            return self.problem
        now = self.describe()
        if now is None:
            return None
        for topic, role in self.topics.items():
            before, after = self.baseline.get(topic), now.get(topic)
            if before is None:
                if after is not None:
                    self.baseline[topic] = after
                continue
            if after is None:
                what = "vanished (the broker no longer has it)"
            elif before.topic_id is not None and after.topic_id is not None and before.topic_id != after.topic_id:
                what = (f"was deleted and recreated (topic id {before.topic_id} -> {after.topic_id}, "
                        f"{before.partitions} -> {after.partitions} partitions)")
            elif after.partitions != before.partitions:
                how = "shrank" if after.partitions < before.partitions else "grew"
                what = f"{how} from {before.partitions} to {after.partitions} partitions"
            else:
                continue
            self.problem = (f"{role} topic {topic!r} {what} while the daemon ran: the offsets it read and the "
                            "results it published there no longer match the broker's; stopping rather than "
                            "reading or publishing on the wrong data (restore the topic, then restart: the "
                            "daemon refuses to start if data it needs is gone)")
            log.error("%s", self.problem)
            return self.problem
        return None

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self.timeout + 2)
