"""How much a source reads per poll: one poll per epoch of ``epoch.max_updates`` (the markers after
the updates taken are read in the same poll), the consumer asked for about what an epoch takes,
and a poll that returns as soon as the consumer holds a message. In memory and with a stand-in
for librdkafka's consumer; the Kafka source's behaviour on the real broker is in test_backlog."""

from __future__ import annotations

from ddflow.daemon import EpochPolicy, InputSpec, Worker
from ddflow.daemon.input.source import KafkaSource
from ddflow.daemon.testing import ListSink, ReplaySource

PER_EPOCH = 100


def filled(epochs: int, source: ReplaySource | None = None, first: int = 0) -> ReplaySource:
    """Epochs of PER_EPOCH updates from epoch ``first``: a message of updates, then a marker, each."""
    source = source or ReplaySource([InputSpec("a", "a", fields={"k": "int", "v": "int"})])
    for e in range(first, first + epochs):
        source.send_updates("a", [((i, i % 7), e * PER_EPOCH + i, 1) for i in range(PER_EPOCH)])
        source.advance_to("a", (e + 1) * PER_EPOCH)
    return source


def test_an_epoch_of_max_updates_closes_in_one_poll_with_its_marker():
    source = filled(20)
    worker = Worker(lambda df, i: {"out": i["a"]}, source, ListSink(["out"]),
                    epochs=EpochPolicy(resolution_ns=PER_EPOCH), max_epoch_updates=PER_EPOCH, poll_timeout=0)
    with worker:
        steps = 0
        while worker.frontier < 20 * PER_EPOCH:
            steps += 1
            assert worker.step() is not None, f"step {steps} closed no epoch"
        assert steps == 20 and worker.peak_open_updates == PER_EPOCH


def test_the_consumer_is_asked_for_about_what_an_epoch_takes():
    source = filled(5)
    asked = []
    consume = source._consume

    def counting(max_messages, timeout):
        asked.append(max_messages)
        return consume(max_messages, timeout)

    source._consume = counting
    worker = Worker(lambda df, i: {"out": i["a"]}, source, ListSink(["out"]),
                    epochs=EpochPolicy(resolution_ns=PER_EPOCH), max_epoch_updates=PER_EPOCH, poll_timeout=0)
    with worker:
        worker.run(until=5 * PER_EPOCH, timeout=60)
        filled(45, source, first=5)  # the topic grows: 90 messages wait
        worker.run(until=50 * PER_EPOCH, timeout=60)
    # the first read knows nothing yet and takes what there is; then a message brought 50 updates
    # on average (markers included), so an epoch of 100 takes about 2: the source reads 5 at a
    # time, not max_poll_messages (10,000)
    assert asked[0] == 10_000 and len(asked) > 10 and set(asked[1:]) == {5}


class Consumer:
    """librdkafka's consume: waits for all ``num_messages`` or the timeout."""

    def __init__(self, queued: int) -> None:
        self.queued = queued
        self.calls: list[tuple[int, float]] = []

    def consume(self, num_messages: int, timeout: float) -> list[int]:
        self.calls.append((num_messages, timeout))
        taken = min(num_messages, self.queued)
        self.queued -= taken
        return list(range(taken))


def source_over(consumer: Consumer) -> KafkaSource:
    source = KafkaSource([InputSpec("a", "a")], {"bootstrap.servers": "127.0.0.1:9"})
    source._consumer = consumer
    return source


def test_a_poll_waits_for_the_first_message_only():
    waiting = Consumer(queued=0)
    assert source_over(waiting)._consume(10_000, 0.05) == []
    assert waiting.calls == [(10_000, 0), (1, 0.05)]  # nothing queued: wait for one, then give up
    some = Consumer(queued=3)
    assert len(source_over(some)._consume(10_000, 0.05)) == 3
    assert some.calls == [(10_000, 0)]  # what is queued, at once: never the whole timeout
