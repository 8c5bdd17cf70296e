"""Partitioners: which partition of a topic a keyed message goes to.

* ``ddflow`` (the default): the engine's stable key hash of the record's key fields
  (`ddflow.operators.partition.key_hash`), the hash that also places keys on workers, checkpoint
  shards and backfill shards.
* ``murmur2``: Kafka's default partitioner over the message key's bytes, as the Java client and
  librdkafka's ``murmur2``/``murmur2_random`` partitioners compute it:
  ``(murmur2(key) & 0x7fffffff) % partitions``. A Kafka Streams or ksqlDB job, or any client with
  the default partitioner, that writes the same key bytes puts them on the same partition, so
  their topics are co-partitioned with the output.

Pure functions of bytes: no Kafka client is touched.
"""

from __future__ import annotations

__all__ = ["PARTITIONERS", "kafka_partition", "murmur2"]

PARTITIONERS = ("ddflow", "murmur2")

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (seed ``0x9747b28c``), as the signed int Java returns."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a message keyed ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
