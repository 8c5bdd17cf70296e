"""A worker stopped while its checkpoint loads stops at once: no epoch closes before the load is
done, so nothing was published since the checkpoint and no input offset committed; it drops the
load (a SIGTERM there is served without waiting for it), and the next start restores the same
checkpoint and publishes exactly what the engine computes. On the real broker, in process."""

from __future__ import annotations

import logging
import threading

import pytest
from recovery_support import STEP, make_topics, make_worker

from ddflow.daemon.state.checkpoint import CheckpointStore
from ddflow.daemon.state.snapshot import Snapshot
from test_checkpoint_worker import assert_views_equal_engine, random_stream, run_first_half, spec_with

pytestmark = pytest.mark.kafka


@pytest.fixture
def topics(make_topic):
    return make_topics(make_topic)


def test_a_lone_worker_stopped_while_loading_drops_the_load_and_the_next_start_restores_it(
        kafka_options, topics, tmp_path, monkeypatch, caplog):
    steps = 8
    stream = random_stream(5, steps, per_step=30)
    producer, _ = run_first_half(kafka_options, topics, tmp_path, stream, steps)
    half = (steps // 2) * STEP
    while producer.send_step():
        pass
    producer.close()
    store = CheckpointStore(tmp_path)
    before = [p.name for p in store.checkpoints()]

    released = threading.Event()  # the load holds until the stop was asked for
    read_blocks = Snapshot.read_blocks

    def held_read_blocks(self, *args, **kwargs):
        released.wait(120)
        return read_blocks(self, *args, **kwargs)

    monkeypatch.setattr(Snapshot, "read_blocks", held_read_blocks)
    second = make_worker(spec_with(kafka_options, topics, tmp_path))
    published = []
    publish = second.sink.publish
    second.sink.publish = lambda *a, **k: (published.append(a[:2]), publish(*a, **k))[1]
    second.open()
    assert second.recovery.restored.frontier == half and second.loading
    for _ in range(20):  # live input is read meanwhile, the frontier held at the checkpoint's
        second.step()
    second.stop()
    released.set()  # the load goes on: without the fix, the stop waits for it and publishes its epoch
    with caplog.at_level(logging.INFO, logger="ddflow.daemon.worker"):
        epochs = second.run(timeout=120)
    second.close()  # opened here, so not closed by run()
    assert epochs == 0 and published == [] and second.frontier < half
    assert "stopped while loading" in caplog.text and "the next start restores it again" in caplog.text
    assert [p.name for p in store.checkpoints()] == before  # no checkpoint written on the way out

    monkeypatch.setattr(Snapshot, "read_blocks", read_blocks)
    third = make_worker(spec_with(kafka_options, topics, tmp_path))
    third.open()
    assert third.recovery.restored.frontier == half
    third.run(until=steps * STEP, timeout=120)
    third.close()
    assert_views_equal_engine(kafka_options, topics, stream, steps * STEP)
