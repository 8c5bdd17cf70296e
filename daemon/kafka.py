"""Kafka client plumbing shared by sources, sinks, the producer helper and the result client.

``kafka_options`` everywhere is a plain dict of librdkafka settings (``bootstrap.servers``,
``security.protocol``, ``sasl.*``, ...) passed through unchanged; each component adds only the
settings its role needs (and never logs values of secret keys, see `redact`). Topic metadata
and creation go through the AdminClient.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ..config.secrets import mask
from .exceptions import KafkaError, OptionsError

__all__ = ["client_config", "redact", "topic_partitions", "ensure_topics"]


def client_config(kafka_options: Mapping[str, Any], role: Mapping[str, Any], *, who: str) -> dict[str, Any]:
    """Merge the user's options with a role's defaults (user options win, except ``role``
    entries that the component needs to work, which are the ``role`` values)."""
    if not isinstance(kafka_options, Mapping):
        raise OptionsError(f"{who}: kafka_options must be a dict of librdkafka settings, got {kafka_options!r}")
    if not kafka_options.get("bootstrap.servers"):
        raise OptionsError(f"{who}: kafka_options has no 'bootstrap.servers'")
    config = {"log_level": 3, **dict(kafka_options)}
    config.update(role)
    return config


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe to log: values of secret names (any case) replaced by '***'."""
    return dict(mask(dict(config)))


def _admin(kafka_options: Mapping[str, Any]) -> AdminClient:
    return AdminClient(client_config(kafka_options, {}, who="admin client"))


def topic_partitions(kafka_options: Mapping[str, Any], topic: str, *, timeout: float = 10.0) -> int:
    """Number of partitions of ``topic``; KafkaError if it does not exist."""
    admin = _admin(kafka_options)
    try:
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaError(f"reading metadata of topic {topic!r}: {exc}") from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        why = "does not exist" if info is None or not info.partitions else str(info.error)
        raise KafkaError(f"reading metadata of topic {topic!r}: it {why}; create it first (or pass create_topics)")
    return len(info.partitions)


def ensure_topics(
    kafka_options: Mapping[str, Any],
    topics: Mapping[str, int],
    *,
    replication: int = 1,
    timeout: float = 10.0,
) -> list[str]:
    """Create the topics (name -> partitions) that do not exist yet; returns the ones created."""
    admin = _admin(kafka_options)
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise KafkaError(f"listing topics: {exc}") from exc
    missing = [NewTopic(name, partitions, replication) for name, partitions in topics.items() if name not in existing]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                continue
            raise KafkaError(f"creating topic {name!r}: {exc}") from exc
    return created
