"""The daemon package's public names are pinned (changing them is an API change)."""

from __future__ import annotations

import ddflow.daemon as daemon


def test_public_names():
    assert sorted(daemon.__all__) == sorted([
        "BrokerError", "Change", "DaemonError", "DdflowError", "DeadLetter", "EmbeddedBroker", "EpochPolicy", "EpochReport",
        "InputSpec", "KafkaClientError", "KafkaSink", "KafkaSource", "OptionsError", "OutputSpec", "ProtocolError",
        "REASONS", "ResultClient", "Sink", "Source", "Stats", "UpdateProducer", "WireError", "Worker", "WorkerError",
        "decode_dead_letter", "kafka_worker",
    ])
    for name in daemon.__all__:
        assert getattr(daemon, name) is not None


def test_one_root_exception():
    for name in ("BrokerError", "KafkaClientError", "OptionsError", "ProtocolError", "WireError", "WorkerError"):
        assert issubclass(getattr(daemon, name), daemon.DaemonError)


def test_one_root_for_every_ddflow_error():
    """Engine, config and daemon errors share one root, the same class wherever it is imported from,
    and a real failure of each layer is caught by ``except DdflowError``."""
    import ddflow.config as config
    import ddflow.operators as ops
    from ddflow.config.errors import DdflowError

    assert ops.DdflowError is config.DdflowError is daemon.DdflowError is DdflowError
    for root in (ops.DataflowError, config.ConfigError, daemon.DaemonError):
        assert issubclass(root, DdflowError) and root is not DdflowError
    df = ops.Dataflow()
    edges = df.new_input("edges")
    edges.advance_to(10)
    failures = [
        lambda: edges.insert((1, 2), 5),  # behind the input's frontier: the engine's TimeError
        lambda: config.parse_config("[inputs", source="bad.toml"),  # not TOML: a ConfigError
        lambda: daemon.InputSpec("", "topic"),  # a bad option: the daemon's OptionsError
    ]
    caught = []
    for fail in failures:
        try:
            fail()
        except DdflowError as exc:
            caught.append(type(exc).__name__)
    assert caught == ["TimeError", "ConfigError", "OptionsError"]


def test_the_kafka_client_error_does_not_shadow_confluent_kafkas():
    import confluent_kafka

    import ddflow.daemon.exceptions as exceptions

    assert not hasattr(exceptions, "KafkaError") and not hasattr(daemon, "KafkaError")
    assert daemon.KafkaClientError is not confluent_kafka.KafkaError
    assert issubclass(exceptions.TopicChanged, daemon.KafkaClientError)
