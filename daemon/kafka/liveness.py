"""Whether the broker answers: a metadata request every second, from a client of its own.

The request asks for one ``topic`` the daemon uses (the whole cluster's metadata without one),
never creating it (``allow.auto.create.topics`` off), so it costs the broker little.

A broker can stop answering without closing a connection (a frozen process, a network partition,
a full disk): librdkafka's calls then wait out their timeouts and nothing says why. A `BrokerWatch`
asks for the cluster's metadata every ``interval`` seconds from a thread and an admin client of
its own, so its verdict holds whatever the worker is blocked in. ``silent_for()`` is the time since
the broker last answered (0 while it answers); once that passes ``said_after`` seconds the watch
logs one WARNING (address, error, for how long) and ``reason()`` says it, for ``/readyz``; when the
broker answers again an INFO line says after how long. What to do about a long silence is the
caller's (`service.Service` exits once it outlasts ``kafka.transaction_timeout``).

`wait` is for the start: it returns once the broker answered, probing with backoff (0.5 s, doubling,
at most ``MAX_BACKOFF_S``), or False when ``limit`` seconds passed or ``stop`` was set first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from .client import client_config

__all__ = ["BrokerWatch", "MAX_BACKOFF_S"]

log = logging.getLogger("ddflow.daemon.broker")

MAX_BACKOFF_S = 5.0  # the longest pause between two probes while waiting for the broker at start


class BrokerWatch:
    """Probes the broker of ``kafka_options`` (see the module docstring), asking for ``topic``'s
    metadata (None: every topic's). ``interval``: seconds
    between probes once started; ``timeout``: how long one probe waits for the answer;
    ``said_after``: seconds of silence before it is logged and ``reason()`` is set."""

    def __init__(self, kafka_options: Mapping[str, Any], *, topic: str | None = None, interval: float = 1.0,
                 timeout: float = 2.0, said_after: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.address = str(kafka_options.get("bootstrap.servers"))
        self.interval = interval
        self.timeout = timeout
        self.said_after = said_after
        self._clock = clock
        self.topic = topic
        self._admin = AdminClient(client_config(kafka_options, {"allow.auto.create.topics": False},
                                                who="broker watch"))
        self.answered: float | None = None  # clock time of the last answer (None: never yet)
        self.answered_wall: float | None = None  # the same, as Unix time (for the metric)
        self.error: str | None = None  # why the last probe failed (None: it was answered)
        self._since = clock()  # since when the broker is silent (start, or the answer before)
        self._said = False  # the silence was logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- probing -------------------------------------------------------------------------------------

    def probe(self, timeout: float | None = None) -> bool:
        """One metadata request; whether the broker answered (``error`` says why not)."""
        try:
            self._admin.list_topics(topic=self.topic, timeout=self.timeout if timeout is None else timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            self.error = error.str() if hasattr(error, "str") else str(exc)
            self._silent()
            return False
        now = self._clock()
        if self._said:
            log.info("the broker at %s answers again after %.0f s without an answer", self.address, now - self._since)
        self.answered, self.answered_wall, self.error, self._since, self._said = now, time.time(), None, now, False
        return True

    def _silent(self) -> None:
        silent = self.silent_for()
        if not self._said and silent >= self.said_after:
            self._said = True
            log.warning("the broker at %s has not answered for %.0f s (%s); /readyz fails until it answers",
                        self.address, silent, self.error)

    def silent_for(self) -> float:
        """Seconds since the broker last answered (since the watch started, if never), 0 while the
        last probe was answered."""
        return 0.0 if self.error is None and self.answered is not None else self._clock() - self._since

    @property
    def answering(self) -> bool:
        """Whether the broker answered within the last ``said_after`` seconds."""
        return self.silent_for() < self.said_after and (self.answered is not None or self.error is None)

    def reason(self) -> str | None:
        """Why the broker counts as silent (None while it answers): address, error, for how long."""
        if self.answering:
            return None
        silent = self.silent_for()
        if self.answered is None:
            return f"waiting for the broker at {self.address} for {silent:.0f} s: {self.error or 'no answer yet'}"
        return f"the broker at {self.address} has not answered for {silent:.0f} s: {self.error or 'no answer'}"

    # -- at start ------------------------------------------------------------------------------------

    def wait(self, limit: float, stop: threading.Event) -> bool:
        """Probe with backoff until the broker answers (True), ``limit`` seconds pass or ``stop``
        is set (False)."""
        deadline = self._clock() + limit
        pause = 0.5
        while not stop.is_set():
            if self.probe(min(self.timeout, max(0.1, deadline - self._clock()))):
                return True
            left = deadline - self._clock()
            if left <= 0:
                return False
            stop.wait(min(pause, left))
            pause = min(2 * pause, MAX_BACKOFF_S)
        return False

    # -- running -------------------------------------------------------------------------------------

    def start(self) -> BrokerWatch:
        """Probe every ``interval`` seconds in a daemon thread until `close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ddflow-broker-watch", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            self.probe()
            self._stop.wait(max(0.0, self.interval - (self._clock() - started)))

    def close(self) -> None:
        """End the probes (a probe in progress ends with its timeout, in its daemon thread)."""
        self._stop.set()
        self._thread = None
