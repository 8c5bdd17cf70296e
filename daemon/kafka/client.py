"""Kafka client plumbing shared by sources, sinks, the producer helper and the result client.

librdkafka does not always honour the timeout of a blocking call (``send_offsets_to_transaction``
was seen blocked for minutes after a broker restart), and while the calling thread is inside it no
Python code runs there. `bounded` runs such a call in a helper thread and gives up on it after its
own timeout plus a grace, raising `BrokerTimeout` naming the call: every blocking broker call of
the data path goes through it, so none can hang the worker.

``kafka_options`` everywhere is a plain dict of librdkafka settings (``bootstrap.servers``,
``security.protocol``, ``sasl.*``, ...) passed through unchanged; each component adds only the
settings its role needs (and never logs values of secret keys, see `redact`). Topic metadata
and creation go through the AdminClient.

No client ddflow builds lets the broker auto-create a topic (``allow.auto.create.topics`` is
false whatever the options say): a producer's or a metadata request's auto-created topic gets the
broker's default partition count, which is not what the daemon needs, and a topic that vanished
with a restarted broker must be noticed, not silently recreated empty. Topics are created by `ensure_topics` with the
counts asked for, or by their owners; a missing one is an error naming it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ...config.secrets import mask
from ..exceptions import BrokerTimeout, KafkaClientError, OptionsError
from .logs import LIBRDKAFKA_LOGGER

__all__ = ["client_config", "redact", "topic_partitions", "ensure_topics", "option_problems", "bounded",
           "unreachable", "BOUNDED_GRACE"]

T = TypeVar("T")

# seconds a bounded call may run past the timeout it gives librdkafka, before it is given up on
BOUNDED_GRACE = 5.0


def bounded(call: Callable[[], T], timeout: float, what: str, *, grace: float = BOUNDED_GRACE) -> T:
    """``call()``, given up on after ``timeout + grace`` seconds with a `BrokerTimeout` naming ``what``.

    ``call`` runs in a daemon thread; its exceptions are raised here. ``timeout`` should be the one
    ``call`` passes to librdkafka, so that librdkafka's own timeout error normally comes first. A call
    given up on keeps its thread (librdkafka cannot be interrupted); the client it used must not be
    used again, and the caller is expected to fail.
    """
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the caller
            box.append((False, exc))

    thread = threading.Thread(target=target, name=f"ddflow-kafka-call: {what}"[:60], daemon=True)
    thread.start()
    thread.join(timeout + grace)
    if not box:
        raise BrokerTimeout(f"{what}: no answer within {timeout + grace:.0f} s (librdkafka was given {timeout:.0f} s "
                            "and did not return); the broker is unreachable, frozen or was restarted")
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def client_config(kafka_options: Mapping[str, Any], role: Mapping[str, Any], *, who: str) -> dict[str, Any]:
    """Merge the user's options with a role's defaults (user options win, except ``role``
    entries that the component needs to work, which are the ``role`` values). librdkafka's log
    lines go to Python logging, deduplicated (`logs`)."""
    if not isinstance(kafka_options, Mapping):
        raise OptionsError(f"{who}: kafka_options must be a dict of librdkafka settings, got {kafka_options!r}")
    if not kafka_options.get("bootstrap.servers"):
        raise OptionsError(f"{who}: kafka_options has no 'bootstrap.servers'")
    config = {"log_level": 3, "logger": LIBRDKAFKA_LOGGER, **dict(kafka_options)}
    config.update(role)
    config["allow.auto.create.topics"] = False  # see the module: topics are created with their counts, or refused
    return config


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe to log: values of secret names (any case) replaced by '***'."""
    return dict(mask(dict(config)))


# The settings each client adds to the user's options (as the source, the sink and the admin
# calls do), so that a user option that conflicts with them is caught too.
_CHECKED_ROLES: tuple[tuple[str, Any, dict[str, Any]], ...] = (
    ("input consumer", Consumer, {"group.id": "ddflow-check", "enable.auto.commit": False,
                                  "enable.auto.offset.store": False, "enable.partition.eof": True,
                                  "isolation.level": "read_committed"}),
    ("output producer", Producer, {"transactional.id": "ddflow-check", "enable.idempotence": True}),
    ("admin client", AdminClient, {}),
)


def _refusal(kind: Any, config: dict[str, Any]) -> str | None:
    """What librdkafka says when it refuses to build a ``kind`` client from ``config`` (None: built).
    The client is closed at once; building one does not wait for the broker."""
    try:
        client = kind(config)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return error.str() if hasattr(error, "str") else str(exc)
    except (TypeError, ValueError) as exc:
        return str(exc)
    if isinstance(client, Consumer):
        client.close()
    return None


def option_problems(
    kafka_options: Mapping[str, Any], *, placeholders: Iterable[str] = (), together: bool = True
) -> list[tuple[str | None, str]]:
    """Build every client the daemon builds from ``kafka_options`` and return what librdkafka refuses,
    as (option name, message) pairs; the name is None for options refused together.

    Each option is first set alone, which catches unknown names and bad values (attributed to the
    name the user wrote even when librdkafka's message names an alias, e.g. ``compression.codec`` for
    ``compression.type``); then the clients are built from all options, which catches options that
    conflict (``acks`` with idempotence, SASL without credentials, an unreadable
    ``ssl.ca.location``); ``together=False`` skips that step. Options named in
    ``placeholders`` (secrets) are checked with a placeholder value, so a message never echoes a
    secret. Building a client does not contact the broker.
    """
    hidden = set(placeholders)
    options = {k: ("placeholder" if k in hidden else v) for k, v in kafka_options.items()}
    base = {"bootstrap.servers": options.get("bootstrap.servers") or "127.0.0.1:9092", "log_level": 0}
    problems: list[tuple[str | None, str]] = []
    for name, value in options.items():
        refused = _refusal(AdminClient, {**base, name: value})
        if refused is not None and not refused.startswith("Failed to create"):  # a name or value refused
            problems.append((name, refused.strip()))
    if problems or not together:
        return problems
    for who, kind, role in _CHECKED_ROLES:
        refused = _refusal(kind, {**base, **options, **role})
        if refused is not None:
            return [(None, f"{refused.strip()} (the {who} refuses these options together)")]
    return []


def _admin(kafka_options: Mapping[str, Any]) -> AdminClient:
    return AdminClient(client_config(kafka_options, {}, who="admin client"))


# librdkafka's errors that mean no broker answered at all
_UNREACHABLE = frozenset(("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_MSG_TIMED_OUT"))


def unreachable(kafka_options: Mapping[str, Any], exc: KafkaException, waited: float) -> str | None:
    """One line saying that no broker answered (address, error, for how long), when ``exc`` says so."""
    error = exc.args[0] if exc.args else None
    if getattr(error, "name", lambda: "")() not in _UNREACHABLE:
        return None
    return (f"the broker at {kafka_options.get('bootstrap.servers')} is unreachable: {error.str()} "
            f"(no answer within {waited:.1f} s); is it running, and is kafka.bootstrap right?")


def read_position(consumer: Consumer, topic: str, partition: int) -> int | None:
    """The offset ``consumer`` reads next in ``topic[partition]``: past the transaction markers it
    skipped, which no message shows. None before it read any, or when it cannot say."""
    try:
        at = consumer.position([TopicPartition(topic, partition)])[0].offset
    except KafkaException:
        return None
    return at if at >= 0 else None


def topic_partitions(kafka_options: Mapping[str, Any], topic: str, *, timeout: float = 10.0) -> int:
    """Number of partitions of ``topic``; KafkaClientError if it does not exist, or no broker answers
    (said in one line, see `unreachable`)."""
    admin = _admin(kafka_options)
    started = time.monotonic()
    try:
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        said = unreachable(kafka_options, exc, time.monotonic() - started)
        raise KafkaClientError(f"reading metadata of topic {topic!r}: {said or exc}") from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        why = "does not exist" if info is None or not info.partitions else str(info.error)
        if why == "does not exist":
            why += (" (ddflow never lets the broker auto-create a topic: it would get the broker's default "
                    "partition count)")
        raise KafkaClientError(f"reading metadata of topic {topic!r}: it {why}; create it first (ddflow run "
                               "--create-topics N or ddflow produce --partitions N create missing topics)")
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
    started = time.monotonic()
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        said = unreachable(kafka_options, exc, time.monotonic() - started)
        raise KafkaClientError(f"listing topics: {said or exc}") from exc
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
            raise KafkaClientError(f"creating topic {name!r}: {exc}") from exc
    return created
