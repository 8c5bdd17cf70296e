"""ddflow daemon: Kafka sources and sinks, progress, metrics, the command line.

The data path's public names are re-exported here: the embedded broker, the update producer and
the result-topic client for users; the source/sink protocols (`io`), their Kafka implementations,
the epoch policy, the worker and `kafka_worker` (`factory`) for the service; in-memory doubles
of the source and sink are in `ddflow.daemon.testing`.

Layout, by concept, in layers: a module imports only from its own layer or the layers below it
(``tests/test_import_layers.py`` checks it, and that no modules import each other in a cycle).
From the bottom:

1. `exceptions` (the error tree), `block` (update columns, the shape every path shares),
   `durable` (crash-safe local files);
2. `formats`: wire formats, pure bytes <-> updates (msgpack with its codec kernels, json, debezium,
   the result-topic protocol);
3. `observe`: counters, Prometheus metrics, HTTP endpoints;
4. `kafka`: client plumbing, the embedded broker, the update producer, the result client;
5. `deadletter` (dead-letter records, written by sources and sinks), then `io` (the `Source`/`Sink`
   seam the worker knows);
6. `input`: the Kafka source (intake, progress, reclocking, floors);
7. `output`: the Kafka sink and its commits;
8. `state`: snapshots, checkpoints, recovery, backfill;
9. `worker` (one worker's loop; `epochs`: closing an epoch), then `cluster` (the worker of several, its exchange transport and
   clock), then `factory` (workers from specs), `service` (a configured daemon), `testing` (the
   in-memory doubles);
10. `cli`: the ``ddflow`` command, its commands and the demo.

`ddflow.operators` (the engine) and `ddflow.config` are below all of it; they never import the daemon.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module defining it; modules load on first use, so that `ddflow --help` and the
# light commands do not import the Kafka, Arrow and engine stacks they do not need
_WHERE = {
    "BrokerError": "exceptions",
    "Change": "kafka.results",
    "DaemonError": "exceptions",
    "DdflowError": "exceptions",
    "DeadLetter": "deadletter",
    "EmbeddedBroker": "kafka.broker",
    "EpochPolicy": "input.progress",
    "EpochReport": "observe.stats",
    "InputSpec": "input.source",
    "KafkaClientError": "exceptions",
    "KafkaSink": "output.sink",
    "KafkaSource": "input.source",
    "OptionsError": "exceptions",
    "OutputSpec": "output.sink",
    "ProtocolError": "exceptions",
    "REASONS": "formats.types",
    "Sink": "io",
    "Source": "io",
    "ResultClient": "kafka.results",
    "Stats": "observe.stats",
    "UpdateProducer": "kafka.producer",
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
