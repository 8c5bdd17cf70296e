"""Watching a result topic's progress markers without decoding its updates (for the daemon
benchmarks): a read_committed consumer that decodes only the small messages, so the benchmark's own
reading costs about what a bare consumer's does and does not compete with the daemons for the
cores, as a ``ResultClient`` decoding every update in Python would."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition

from ddflow.daemon.formats.result_protocol import OutputProgress, decode_output

MARKER_BYTES = 512  # markers are small maps; a batch of updates is larger


def marker_consumer(bootstrap: str, topic: str, partitions: int = 1) -> Consumer:
    """A read_committed consumer of every partition of ``topic`` from its start; a marker is seen
    when its transaction commits, not at the next long poll (``fetch.wait.max.ms`` 5)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 5})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return c


def committed_markers(c: Consumer, timeout: float = 0.05) -> list[tuple[int, OutputProgress]]:
    """The progress markers of one read, with their partitions (batches of updates left undecoded)."""
    out = []
    for m in c.consume(10_000, timeout):
        if m.error() is not None:
            raise RuntimeError(str(m.error()))
        value = m.value()
        if value is None or len(value) > MARKER_BYTES:
            continue
        marker = decode_output(value)
        if isinstance(marker, OutputProgress):
            out.append((m.partition(), marker))
    return out
