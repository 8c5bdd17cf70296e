"""The daemon package's public names are pinned (changing them is an API change)."""

from __future__ import annotations

import ddflow.daemon as daemon


def test_public_names():
    assert sorted(daemon.__all__) == sorted([
        "BrokerError", "Change", "DaemonError", "DeadLetter", "EmbeddedBroker", "EpochPolicy", "EpochReport",
        "InputSpec", "KafkaClientError", "KafkaSink", "KafkaSource", "OptionsError", "OutputSpec", "ProtocolError",
        "REASONS", "ResultClient", "Sink", "Source", "Stats", "UpdateProducer", "WireError", "Worker", "WorkerError",
        "decode_dead_letter", "kafka_worker",
    ])
    for name in daemon.__all__:
        assert getattr(daemon, name) is not None


def test_one_root_exception():
    for name in ("BrokerError", "KafkaClientError", "OptionsError", "ProtocolError", "WireError", "WorkerError"):
        assert issubclass(getattr(daemon, name), daemon.DaemonError)


def test_the_kafka_client_error_does_not_shadow_confluent_kafkas():
    import confluent_kafka

    import ddflow.daemon.exceptions as exceptions

    assert not hasattr(exceptions, "KafkaError") and not hasattr(daemon, "KafkaError")
    assert daemon.KafkaClientError is not confluent_kafka.KafkaError
    assert issubclass(exceptions.TopicChanged, daemon.KafkaClientError)
