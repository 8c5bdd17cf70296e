"""The liveness keys, read, validated and used by the daemon: how long the output frontier may
stand still before it is said (``worker.frontier_stall_timeout``), how long the daemon waits for
the broker at start (``kafka.connect_timeout``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddflow.config import ConfigError, load_config
from support.configs import VALID


def load(tmp_path: Path, extra: str):
    path = tmp_path / "daemon.toml"
    path.write_text(VALID + extra)
    return load_config(path)


def test_frontier_stall_timeout_is_read_and_defaults_to_30_s(tmp_path: Path) -> None:
    assert load(tmp_path, "").worker.frontier_stall_timeout_ns == 30 * 10**9
    config = load(tmp_path, '[worker]\nfrontier_stall_timeout = "2m"\n')
    assert config.worker.frontier_stall_timeout_ns == 120 * 10**9
    assert config.redacted()["worker"]["frontier_stall_timeout_ns"] == 120 * 10**9


@pytest.mark.parametrize("value", ['"10ms"', '"soon"', "5"])
def test_a_bad_frontier_stall_timeout_names_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"[worker]\nfrontier_stall_timeout = {value}\n")
    assert info.value.keys == ["worker.frontier_stall_timeout"]


def test_connect_timeout_is_read_and_checked(tmp_path: Path) -> None:
    assert load(tmp_path, "").kafka.connect_timeout_ns == 120 * 10**9
    kafka = VALID.replace('bootstrap = "127.0.0.1:9092"', 'bootstrap = "127.0.0.1:9092"\nconnect_timeout = "@"')
    path = tmp_path / "daemon.toml"
    path.write_text(kafka.replace("@", "10s"))
    config = load_config(path)
    assert config.kafka.connect_timeout_ns == 10 * 10**9
    assert config.redacted()["kafka"]["connect_timeout_ns"] == 10 * 10**9
    assert config.kafka.with_bootstrap("b:1").connect_timeout_ns == 10 * 10**9
    for bad in ("0s", "never"):
        path.write_text(kafka.replace("@", bad))
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.keys == ["kafka.connect_timeout"]


def test_the_daemon_says_a_stall_after_the_configured_time(tmp_path: Path, monkeypatch) -> None:
    from ddflow.daemon import service as service_module
    from ddflow.daemon.input.source import InputSpec
    from ddflow.daemon.testing import ListSink, ReplaySource
    from ddflow.daemon.worker import Worker

    def memory_worker(config, stats, **_):
        sink = ListSink(["reachable"])
        source = ReplaySource([InputSpec("edges", "edges", fields=["src", "dst"])], dead_letters=sink.dead_letters)
        return Worker(lambda df, i: {"reachable": i["edges"]}, source, sink, stats=stats)

    monkeypatch.setattr(service_module, "make_worker", memory_worker)
    monkeypatch.setattr(service_module, "watch_broker", lambda config: None)  # no broker here
    config = load(tmp_path, '[worker]\nfrontier_stall_timeout = "7s"\n')
    service = service_module.Service(config)
    service.run(timeout=0.2)
    assert service.worker.stalls.after == 7.0
