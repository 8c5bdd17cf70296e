"""A worker process for the signal tests: ``python run_worker.py '<json spec>'``.

The spec names the broker, the flow in `flows`, the inputs/outputs and the epoch policy. The
process prints ``ready`` once open, ``input <t>`` when its input frontier moves, ``frontier <t>`` after every epoch and ``exit <t>`` when it stops on SIGTERM.
With ``die_after_batches: n`` it SIGKILLs itself right after producing its n-th output batch
(flushed, so the broker holds it) - in the middle of an epoch's transaction, before its markers.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

import flows

from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker
from ddflow.daemon.cli.signals import stop_on_signals
from ddflow.daemon.worker import Worker


def main() -> None:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    worker = kafka_worker(
        getattr(flows, spec["flow"]),
        [InputSpec(**i) for i in spec["inputs"]],
        [OutputSpec(**o) for o in spec["outputs"]],
        spec["kafka_options"],
        group_id=spec["group_id"],
        epochs=EpochPolicy(**spec.get("epoch", {})),
        dead_letter_topic=spec.get("dead_letter_topic"),
        max_poll_messages=spec.get("max_poll_messages", 10_000),
    )
    worker.stats.on_epoch(lambda report: print(f"frontier {report.upper}", flush=True))
    report_input_frontier(worker)
    if spec.get("die_after_batches"):
        die_in_the_middle_of_an_epoch(worker, spec["die_after_batches"])
    stop_on_signals(worker)
    worker.open()
    print("ready", flush=True)
    worker.run()
    print(f"exit {worker.frontier}", flush=True)


def report_input_frontier(worker: Worker) -> None:
    step = worker.step
    last = [None]

    def step_and_report():  # type: ignore[no-untyped-def]
        report = step()
        if worker.stats.input_frontier != last[0]:
            last[0] = worker.stats.input_frontier
            print(f"input {last[0]}", flush=True)
        return report

    worker.step = step_and_report  # type: ignore[method-assign]


def die_in_the_middle_of_an_epoch(worker: Worker, batches: int) -> None:
    sink = worker.sink
    produce = sink._produce
    produced = 0

    def produce_then_maybe_die(producer, topic, partition, key, value, headers, *marker):  # type: ignore[no-untyped-def]
        nonlocal produced
        produce(producer, topic, partition, key, value, headers, *marker)
        if b"updates" in value[:80]:  # an output batch, not a progress marker
            produced += 1
            if produced >= batches:
                producer.flush(10)
                os.kill(os.getpid(), signal.SIGKILL)

    sink._produce = produce_then_maybe_die  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
