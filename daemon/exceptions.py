"""The daemon's exceptions: one root, one subclass per step that can fail.

    DdflowError              root of every ddflow error (`ddflow.config.errors`)
    DaemonError
    ├── BrokerError          the embedded broker would not start / answer
    ├── KafkaClientError     a Kafka client call failed (names the topic/partition)
    │   ├── BrokerTimeout    a blocking broker call did not return within its bound
    │   ├── BrokerSilent     the broker answered nothing for longer than the daemon may wait
    │   ├── Fenced           another instance took over this daemon's transactional.id
    │   └── TopicChanged     a topic vanished, was recreated or changed partitions while running
    ├── Stopped              a stop request ended a long read while opening (nothing published)
    ├── OptionsError         a bad option passed to a source, sink, producer or worker
    ├── WireError            an encoding that cannot be written (e.g. an unencodable record)
    ├── ProtocolError        a result topic that breaks the output protocol
    ├── WorkerError          the worker loop failed (names the epoch and the step)
    │   └── StuckWorker      the worker loop is blocked and could not be stopped in time
    ├── SnapshotError        a snapshot that is torn, corrupt or does not fit the inputs
    ├── RecoveryError        a restore that would lose data (offsets gone, reclock bindings missing)
    └── BackfillError        the Spark backfill job refused its archive or failed

Malformed *input* is not an exception: it becomes a dead letter (see `deadletter`).
Every message names the step and the offending value, and the cause is chained.
"""

from __future__ import annotations

from ..config.errors import DdflowError

__all__ = [
    "DdflowError",
    "DaemonError",
    "BrokerError",
    "KafkaClientError",
    "BrokerTimeout",
    "BrokerSilent",
    "Fenced",
    "TopicChanged",
    "OptionsError",
    "WireError",
    "ProtocolError",
    "WorkerError",
    "StuckWorker",
    "SnapshotError",
    "RecoveryError",
    "BackfillError",
    "Stopped",
]


class DaemonError(DdflowError):
    """Root of every error raised by `ddflow.daemon`."""


class BrokerError(DaemonError):
    """The embedded broker could not be started or did not answer."""


class KafkaClientError(DaemonError):
    """A Kafka client operation failed."""


class BrokerTimeout(KafkaClientError):
    """A blocking broker call did not return within its bound (librdkafka ignored its timeout)."""


class BrokerSilent(KafkaClientError):
    """The broker answered no request for longer than the daemon may wait (``kafka.transaction_timeout``
    while running, ``kafka.connect_timeout`` at start), or while the daemon was asked to stop."""


class Fenced(KafkaClientError):
    """Another producer initialised transactions with this daemon's ``transactional.id`` (a second
    daemon with the same config): this one may publish nothing more."""


class TopicChanged(KafkaClientError):
    """A topic the daemon uses vanished, was deleted and recreated, or changed its partition count
    while the daemon ran: its offsets and published results no longer match the broker's."""


class Stopped(DaemonError):
    """A stop request (SIGTERM) ended a long read while the daemon opened, e.g. reading its result
    topics back: nothing was published yet, and the next start does the read again."""


class OptionsError(DaemonError):
    """An option given to a daemon component is invalid; the message names the option."""


class WireError(DaemonError):
    """A value cannot be encoded in the wire format."""


class ProtocolError(DaemonError):
    """A result topic holds messages that contradict the output protocol."""


class WorkerError(DaemonError):
    """The worker loop failed; the message names the epoch and the step."""


class StuckWorker(WorkerError):
    """The worker loop is blocked (e.g. inside a broker call) and did not stop within the stop
    timeout: the process must exit without finishing the epoch (a restart resumes safely)."""


class SnapshotError(DaemonError):
    """A snapshot cannot be used: torn or corrupt (names the file and what differs), or its
    inputs, fields or offsets do not match the daemon's configuration."""


class RecoveryError(DaemonError):
    """Restoring would silently lose or change data: recorded offsets the broker no longer holds,
    reclock bindings that were dropped, a partition that disappeared."""


class BackfillError(DaemonError):
    """The backfill job refused its history archive (names the column or value) or Spark failed."""
