"""The daemon package's public names are pinned (changing them is an API change)."""

from __future__ import annotations

import ddflow.daemon as daemon


def test_public_names():
    assert sorted(daemon.__all__) == sorted([
        "BrokerError", "Change", "DaemonError", "DeadLetter", "EmbeddedBroker", "EpochPolicy", "EpochReport",
        "InputSpec", "KafkaError", "KafkaSink", "KafkaSource", "OptionsError", "OutputSpec", "ProtocolError",
        "REASONS", "ResultClient", "Stats", "UpdateProducer", "WireError", "Worker", "WorkerError",
        "decode_dead_letter",
    ])
    for name in daemon.__all__:
        assert getattr(daemon, name) is not None


def test_one_root_exception():
    for name in ("BrokerError", "KafkaError", "OptionsError", "ProtocolError", "WireError", "WorkerError"):
        assert issubclass(getattr(daemon, name), daemon.DaemonError)
