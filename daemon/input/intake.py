"""A source's intake: the messages read from the consumer and not taken yet, and the partitions
whose messages wait.

A poll takes messages one at a time from the ``backlog`` (what the consumer returned, in order)
and puts back the first one it does not take (`put_back`, with its decoding, so that it is not
decoded twice). The consumer is asked for about as many messages as the epochs take (`wanted`:
twice ``max_updates`` at the updates per message read so far), not for all it may hold: what is
read ahead stays in the consumer's own queue. While an epoch is full, the partitions beyond the
inputs' frontier are ``paused`` (`source.KafkaSource.pause_ahead`): their messages still in
flight wait in a ``stash``, in order, and come first again when they are released (`release`);
with a ``hold``, a partition read is held as soon as a marker takes it beyond that frontier.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Intake"]

Key = tuple[str, int]  # (topic, partition)


class Intake:
    """What a source read and has not taken (see the module docstring)."""

    def __init__(self, max_messages: int = 10_000) -> None:
        self.backlog: deque[Any] = deque()  # messages read and not taken yet, in order
        self.paused: set[Key] = set()  # partitions whose messages wait
        self.unpaused: set[Key] = set()  # those of them the consumer still reads (into the stash)
        self.hold: int | None = None  # while paused: the frontier the partitions read hold
        self.stash: dict[Key, list[Any]] = {}  # messages of paused partitions, in order
        self._peeked: tuple[Any, Any] | None = None  # the backlog's first message, decoded already
        self._updates = self._messages = 0  # read so far
        self._last = max_messages  # what `wanted` last asked for

    def clear(self) -> None:
        """Forget everything (the consumer closed)."""
        self.backlog.clear()
        self.paused.clear()
        self.unpaused.clear()
        self.stash.clear()
        self.hold = None
        self._peeked = None

    def wanted(self, max_messages: int, max_updates: int | None) -> int:
        """How many messages to ask the consumer for, for a poll that may take ``max_updates``
        (None: unbounded, or while partitions are held up to their next marker: as last time)."""
        if max_updates is None:
            return max_messages if self.hold is None else self._last
        if self._updates:
            per_message = self._updates / max(self._messages, 1)
            self._last = max(1, min(max_messages, int(2 * max_updates / per_message) + 1))
            return self._last
        return max_messages

    def counted(self, messages: int, updates: int) -> None:
        """A poll took ``messages`` holding ``updates`` good updates."""
        self._messages += messages
        self._updates += updates

    def put_back(self, msg: Any, decoded: Any) -> None:
        """``msg`` (just taken, decoded as ``decoded``) is not taken after all: it comes first."""
        self.backlog.appendleft(msg)
        self._peeked = (msg, decoded)

    def decoded(self, msg: Any) -> Any:
        """The decoding of ``msg`` if it was put back, else None."""
        peeked, self._peeked = self._peeked, None
        return peeked[1] if peeked is not None and peeked[0] is msg else None

    def wait(self, key: Key, msg: Any) -> None:
        """``msg`` of the paused partition ``key`` waits until it is released."""
        self.stash.setdefault(key, []).append(msg)

    def held(self, key: Key) -> None:
        """Partition ``key`` moved past the frontier held: its next messages wait (the consumer
        still reads it)."""
        self.paused.add(key)
        self.unpaused.add(key)

    def pausing(self, keys: list[Key]) -> None:
        """The consumer paused ``keys``."""
        self.paused.update(keys)
        self.unpaused.difference_update(keys)

    def release(self, keys: list[Key]) -> list[Key]:
        """Read ``keys`` (paused) again: their waiting messages come first, in order. Returns
        those of them the consumer must resume."""
        resume = [key for key in keys if key not in self.unpaused]
        self.paused.difference_update(keys)
        self.unpaused.difference_update(keys)
        waiting = [msg for key in keys for msg in self.stash.pop(key, ())]
        self.backlog.extendleft(reversed(waiting))
        return resume
