"""librdkafka's own log lines through Python logging, each kind said once a minute.

Every client the daemon builds (`client.client_config`) hands librdkafka the logger
``ddflow.kafka.librdkafka``: its lines reach the daemon's log handlers (levels, format, JSON)
instead of raw stderr, delivered when the client is polled. A broker that refuses connections
makes librdkafka repeat the same line several times a second (195 lines in 11 s were seen);
`Deduplicate` lets the first line of each kind through and drops its repeats for ``window``
seconds, and the first one after that says how many were dropped. A line's kind is its facility and
text with durations masked (``after 0ms`` and ``after 3ms`` are the same kind), so distinct brokers
and distinct errors are each said.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

__all__ = ["LIBRDKAFKA_LOGGER", "Deduplicate"]

_DURATION = re.compile(r"\d+ ?ms\b")
_MAX_KINDS = 1_000  # kinds remembered (then forgotten all at once): bounded whatever librdkafka says


class Deduplicate(logging.Filter):
    """Passes the first record of each kind per ``window`` seconds (see the module docstring);
    ``clock``: monotonic seconds (a test passes its own)."""

    def __init__(self, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._seen: dict[tuple[int, str], list[float]] = {}  # kind -> [when said, repeats dropped since]
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        # confluent_kafka logs ("%s [%s] %s", facility, client name, text): the client's name is left out
        text = f"{args[0]} {args[2]}" if len(args) == 3 else record.getMessage()
        kind = (record.levelno, _DURATION.sub("N ms", text))
        now = self._clock()
        seen = self._seen.get(kind)
        if seen is not None and now - seen[0] < self.window:
            seen[1] += 1
            self.dropped += 1
            return False
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} (and %d more like it in the last %.0f s)"
            record.args = (*args, int(seen[1]), now - seen[0]) if args else (int(seen[1]), now - seen[0])
        if len(self._seen) >= _MAX_KINDS:
            self._seen.clear()
        self._seen[kind] = [now, 0]
        return True


LIBRDKAFKA_LOGGER = logging.getLogger("ddflow.kafka.librdkafka")
LIBRDKAFKA_LOGGER.addFilter(Deduplicate())
