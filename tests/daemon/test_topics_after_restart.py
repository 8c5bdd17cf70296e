"""Worker restarts after a broker restart or a lost topic start cleanly: no client ddflow builds lets
the broker auto-create a topic (it would get the broker's default partition count), and a topic the
daemon needs that is missing is an error naming it (the restart after a deleted input topic shows
it). Against real brokers: a restarted in-memory broker loses every topic; two workers (over the
mesh) both stop, and once the operator recreates the topics they read and write, both start again
and the results are exact."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.broker import FETCH_WAIT_MS, create_topic
from test_workers_daemon import MS, T0, Daemons, config, oracle, stream  # type: ignore[import-not-found]

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.producer import UpdateProducer
from ddflow.daemon.kafka.results import ResultClient

pytestmark = pytest.mark.kafka


def run_rounds(bootstrap: str, source: str, results: str, rounds: list, daemons: Daemons) -> dict:
    """Send ``rounds`` and return the result topic's view once its frontier passes the last one."""
    options = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    final = T0 + 10 * len(rounds) * MS
    with UpdateProducer(source, options) as producer, ResultClient(results, options) as client:
        for r, ups in enumerate(rounds):
            for record, t, d in ups:
                producer.send(record, t, d)
            producer.advance_to(T0 + 10 * (r + 1) * MS)
        assert client.wait_for(final, timeout=120), daemons.log()
        return dict(client.view)


def test_two_workers_restarted_after_a_broker_restart_start_cleanly(own_broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap
    names = {"in": (f"in-{tmp_path.name[-12:]}", 2), "out": (f"out-{tmp_path.name[-12:]}", 1),
             "dead": (f"dead-{tmp_path.name[-12:]}", 1)}
    for name, partitions in names.values():
        create_topic(bootstrap, name, partitions)
    path = config(tmp_path, bootstrap, "count-per-page", 2, names["in"][0], names["out"][0], names["dead"][0])
    rounds = stream("count-per-page", rounds=2)
    want = oracle("count-per-page", rounds).at(T0 + 20 * MS - 1)

    first = Daemons(path, 2)
    try:
        assert run_rounds(bootstrap, names["in"][0], names["out"][0], rounds, first) == want
        port = int(bootstrap.rsplit(":", 1)[1])
        own_broker.stop()  # every topic is gone
        own_broker = EmbeddedBroker(port=port, use_environment=False).start()
        codes = [p.wait(timeout=120) for p in first.processes]  # the topic watch stops them
    finally:
        for p in first.processes:
            if p.poll() is None:
                p.kill()
    # each ends: exit 1 naming a vanished topic, or (on this broker) librdkafka's consumer crashing on
    # the broker's answer for a topic it no longer has (see the test of a deleted input topic below)
    assert all(code in (1, -11) for code in codes), (codes, first.log())

    # the operator recreates the topics the daemon reads and writes
    for name, partitions in names.values():
        create_topic(bootstrap, name, partitions)
    again = Daemons(path, 2)
    try:
        assert run_rounds(bootstrap, names["in"][0], names["out"][0], rounds, again) == want
    finally:
        codes = again.stop()
        own_broker.stop()
    assert codes == [0, 0], again.log()


def test_an_input_topic_deleted_under_the_daemon_ends_it_and_its_restart_names_the_topic(
        kafka_broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The probe's case: the input topic is deleted while the daemon runs. The daemon ends (exit 1
    naming the topic when its topic watch sees it first; on this broker librdkafka 2.16's consumer
    crashes first, in its fetch path, on the broker's answer for the deleted topic), nothing
    recreates the topic (none of the daemon's clients may auto-create it), and the restart a
    supervisor makes exits 1 naming the missing topic instead of reading an empty new one."""
    from confluent_kafka.admin import AdminClient
    from daemon_support import FlowDaemon as Daemon
    from support.daemons import DDFLOW as RUN

    daemon = Daemon(tmp_path, kafka_broker.bootstrap, flow="map_only")
    try:
        daemon.send([(1, 1)], 1000 * MS)
        assert daemon.wait_final(1000 * MS) == {(1, 2): 1}
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
        for future in admin.delete_topics([daemon.topics["a"]], operation_timeout=10).values():
            future.result(10)
        code = daemon.exit_code()
    finally:
        daemon.kill()
    if code == 1:
        assert f"input 'a' topic {daemon.topics['a']!r} vanished" in daemon.log, daemon.log
    else:
        assert code == -11, daemon.log  # SIGSEGV inside librdkafka (see the docstring)
    assert daemon.topics["a"] not in admin.list_topics(timeout=10).topics  # nothing recreated it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDFLOW_", "KAFKA_"))}
    restart = subprocess.run([RUN, "run", "--config", str(daemon.config)], capture_output=True, text=True,
                             timeout=180, env=env)
    assert restart.returncode == 1, restart.stderr
    assert f"topic {daemon.topics['a']!r}: it does not exist" in restart.stderr, restart.stderr
    assert daemon.topics["a"] not in admin.list_topics(timeout=10).topics
