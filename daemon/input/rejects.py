"""What a source does with input it cannot take as read: late updates and malformed messages.

Late updates are those whose time is behind their partition's frontier when their message is
read: what the partition's earlier messages promised (`progress`), raised to the worker's
frontier whenever that passed the partition (`source.KafkaSource.raise_to`, at each epoch; such
raises are recorded as `floors` when the worker has checkpoints, and a replay applies them at the
same offsets). Policy ``advance`` moves a late update to that frontier (counted), ``reject``
dead-letters it (`late_updates`). This depends only on the offsets read, never on how messages
fall into polls, so a replay classifies every update as the run that published it did.

A message with anything wrong (malformed updates, rejected late ones) gives one dead letter: the
message's own value and key, with its topic, partition, offset and every reason in headers
(`dead_letter`, `deadletter`); without a dead-letter
writer the reasons are counted and logged, and the message's good updates are kept either way.
"""

from __future__ import annotations

import logging

from ..deadletter import DeadLetterWriter
from ..formats.types import Decoded, Malformed
from ..io import Update
from ..observe.stats import InputStats, Stats
from .inputs import InputSpec

__all__ = ["dead_letter", "late_updates"]

log = logging.getLogger("ddflow.daemon.input.source")


def dead_letter(
    writer: DeadLetterWriter | None, stats: Stats, spec: InputSpec, topic: str, partition: int, offset: int,
    value: bytes | None, bad: list[Malformed], *, key: bytes | None = None,
) -> None:
    """One dead letter for the message at ``topic[partition] offset`` of input ``spec`` (its
    ``value`` and ``key`` as they came), naming all of ``bad``; without a ``writer``, count the
    reasons in ``stats`` and log a warning."""
    where = f"{topic}[{partition}] offset {offset}"
    if writer is None:
        counts = stats.input(spec.name).dead_letters
        for b in bad:
            counts[b.reason] += 1
        log.warning("dropping malformed input at %s (%d bad: %s: %s); no dead-letter topic configured", where,
                    len(bad), bad[0].reason, bad[0].detail)
        return
    log.debug("dead letter from %s: %d bad, first %s: %s", where, len(bad), bad[0].reason, bad[0].detail)
    decoder = type(spec.decoder)
    writer.write(input=spec.name, topic=topic, partition=partition, offset=offset, raw=value, errors=bad, key=key,
                 decoder=f"{decoder.__module__}.{decoder.__qualname__}")


def late_updates(
    spec: InputSpec, stats: InputStats, decoded: Decoded, frontier: int, bad: list[Malformed]
) -> list[Update]:
    """The message's updates with those behind their partition's ``frontier`` advanced to it
    or, under the ``reject`` policy, left out and added to ``bad`` (at their position)."""
    kept: list[Update] = []
    for i, (d, t, r) in enumerate(decoded.updates):
        if t >= frontier:
            kept.append((d, t, r))
        elif spec.late == "advance":
            kept.append((d, frontier, r))
            stats.late_advanced += 1
        else:
            stats.late_rejected += 1
            bad.append(Malformed(
                "late", f"time {t} is behind its partition's frontier {frontier} (late policy 'reject')",
                decoded.index(i),
            ))
    return kept
