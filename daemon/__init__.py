"""ddflow daemon: Kafka sources and sinks, progress, metrics, the command line.

The data path's public names are re-exported here: the embedded broker, the update producer and
the result-topic client for users; sources, sinks, the epoch policy and the worker for the service.
"""

from .broker import EmbeddedBroker
from .deadletter import DeadLetter, decode_dead_letter
from .exceptions import (
    BrokerError,
    DaemonError,
    KafkaError,
    OptionsError,
    ProtocolError,
    WireError,
    WorkerError,
)
from .producer import UpdateProducer
from .progress import EpochPolicy
from .results import Change, ResultClient
from .sink import KafkaSink, OutputSpec
from .source import InputSpec, KafkaSource
from .stats import EpochReport, Stats
from .wire import REASONS
from .worker import Worker

__all__ = [
    "BrokerError",
    "Change",
    "DaemonError",
    "DeadLetter",
    "EmbeddedBroker",
    "EpochPolicy",
    "EpochReport",
    "InputSpec",
    "KafkaError",
    "KafkaSink",
    "KafkaSource",
    "OptionsError",
    "OutputSpec",
    "ProtocolError",
    "REASONS",
    "ResultClient",
    "Stats",
    "UpdateProducer",
    "WireError",
    "Worker",
    "WorkerError",
    "decode_dead_letter",
]
