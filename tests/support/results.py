"""Reading a msgpack result topic as it lies on the broker, for what a failing test says: every
message of it (read uncommitted, from offset 0), how far every writer marked it, and what a
`ResultClient` holds per partition.

Imported by name (``from support.results import dump_topic, reader_state``).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from ddflow.daemon.formats.result_protocol import OutputProgress, decode_output
from ddflow.daemon.kafka.results import ResultClient


def reader_state(client: ResultClient) -> str:
    """What a reader that refused, or never accepted, an epoch holds: its protocol counters and, per
    partition, each writer's final frontier and the epochs read but not accepted."""
    lines = [f"stats {client.stats}"]
    for p, state in enumerate(client._follower.partitions):
        pending = {k: len(v) for k, v in state.pending.items()}
        lines.append(f"[{p}] finals {state.finals} pending {pending} mismatch {state.mismatch!r} began {state.began} "
                     f"first {state.first} marked at {state.marked_at}")
    return "\n".join(lines)


def dump_topic(topic: str, bootstrap: str) -> str:
    """Every message of the result ``topic``, read uncommitted, one line each: partition, offset,
    kind, epoch, incarnation and count (what a reader that refused an epoch was given)."""
    return "\n".join(f"[{p}] {offset}: {what}" for p, offset, what, _ in sorted(read_result_topic(topic, bootstrap)))


def marked_to(topic: str, bootstrap: str, writers: int) -> int:
    """The least, over partitions and writers, of the highest upper a writer's marker reached on the
    result ``topic`` (read uncommitted): how far every writer published on every partition."""
    reached: dict[tuple[int, int], int] = {}
    for p, _, _, m in read_result_topic(topic, bootstrap):
        if isinstance(m, OutputProgress):
            upper = 2**63 if m.upper is None else m.upper
            reached[(p, m.writer)] = max(reached.get((p, m.writer), upper), upper)
    partitions = {p for p, _ in reached}
    return min((reached.get((p, w), -1) for p in partitions for w in range(writers)), default=-1)


def read_result_topic(topic: str, bootstrap: str) -> list[tuple[int, int, str, object]]:
    """(partition, offset, description, decoded message or None) of every message of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dump-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted", "enable.partition.eof": True})
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    lines, ended = [], set()
    deadline = time.monotonic() + 30
    while len(ended) < partitions and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            ended.add(msg.partition())
            continue
        try:
            m = decode_output(msg.value())
            what = (f"marker writer {m.writer}/{m.writers} count {m.count}" if isinstance(m, OutputProgress)
                    else f"batch of {len(m.updates)}")
            lines.append((msg.partition(), msg.offset(), f"{what} [{m.lower}, {m.upper}) {m.incarnation}", m))
        except Exception as exc:  # noqa: BLE001 - shown as it is
            lines.append((msg.partition(), msg.offset(), str(exc), None))
    consumer.close()
    return lines
