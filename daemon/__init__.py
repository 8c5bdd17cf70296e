"""ddflow daemon: Kafka sources and sinks, progress, metrics, the command line.

The data path's public names are re-exported here: the embedded broker, the update producer and
the result-topic client for users; the source/sink protocols (`io`), their Kafka implementations,
the epoch policy, the worker and `kafka_worker` (`factory`) for the service; in-memory doubles
of the source and sink are in `ddflow.daemon.testing`.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module defining it; modules load on first use, so that `ddflow --help` and the
# light commands do not import the Kafka, Arrow and engine stacks they do not need
_WHERE = {
    "BrokerError": "exceptions",
    "Change": "results",
    "DaemonError": "exceptions",
    "DdflowError": "exceptions",
    "DeadLetter": "deadletter",
    "EmbeddedBroker": "broker",
    "EpochPolicy": "progress",
    "EpochReport": "stats",
    "InputSpec": "source",
    "KafkaClientError": "exceptions",
    "KafkaSink": "sink",
    "KafkaSource": "source",
    "OptionsError": "exceptions",
    "OutputSpec": "sink",
    "ProtocolError": "exceptions",
    "REASONS": "wire",
    "Sink": "io",
    "Source": "io",
    "ResultClient": "results",
    "Stats": "stats",
    "UpdateProducer": "producer",
    "WireError": "exceptions",
    "Worker": "worker",
    "WorkerError": "exceptions",
    "decode_dead_letter": "deadletter",
    "kafka_worker": "factory",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "BrokerError",
    "Change",
    "DaemonError",
    "DdflowError",
    "DeadLetter",
    "EmbeddedBroker",
    "EpochPolicy",
    "EpochReport",
    "InputSpec",
    "KafkaClientError",
    "KafkaSink",
    "KafkaSource",
    "OptionsError",
    "OutputSpec",
    "ProtocolError",
    "REASONS",
    "ResultClient",
    "Sink",
    "Source",
    "Stats",
    "UpdateProducer",
    "WireError",
    "Worker",
    "WorkerError",
    "decode_dead_letter",
    "kafka_worker",
]
