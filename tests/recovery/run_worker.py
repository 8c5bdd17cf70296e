"""A worker process for the crash tests: ``python run_worker.py '<json spec>'`` (see
`recovery_support.worker_spec`; ``worker`` holds checkpoint options for `Worker`).

It prints ``ready`` once open, ``restored F`` (the snapshot frontier restored, or None),
``frontier t`` after every epoch, ``checkpoint F`` after every checkpoint written and ``exit t``
when it stops on SIGTERM.

``die: [where, n]`` makes it SIGKILL itself the n-th time it reaches ``where``:
``checkpoint_file`` (right after writing a shard file of a checkpoint, before its manifest),
``checkpoint_rename`` (a checkpoint complete in its staging directory, not renamed into place),
``output_batch`` (an output batch sent inside an epoch's transaction, before its markers).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

from recovery_support import make_worker

import ddflow.daemon.state.snapshot as snapshot_module
from ddflow.daemon.cli.signals import stop_on_signals


def die_at(worker, where: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL this process the n-th time it reaches ``where``."""
    count = 0

    def reached() -> None:
        nonlocal count
        count += 1
        if count >= n:
            os.kill(os.getpid(), signal.SIGKILL)

    if where == "checkpoint_file":
        write = snapshot_module.write_table_file

        def write_then_maybe_die(*args, **kwargs):  # type: ignore[no-untyped-def]
            entry = write(*args, **kwargs)
            reached()
            return entry

        snapshot_module.write_table_file = write_then_maybe_die
    elif where == "checkpoint_rename":
        rename = os.rename

        def maybe_die_then_rename(src, dst):  # type: ignore[no-untyped-def]
            if ".tmp-" in str(src):
                reached()
            return rename(src, dst)

        snapshot_module.os.rename = maybe_die_then_rename  # type: ignore[attr-defined]
    elif where == "output_batch":
        produce = worker.sink._produce

        def produce_then_maybe_die(producer, topic, partition, key, value, headers, *marker):  # type: ignore[no-untyped-def]
            produce(producer, topic, partition, key, value, headers, *marker)
            if b"updates" in value[:80]:
                producer.flush(10)
                reached()

        worker.sink._produce = produce_then_maybe_die
    else:
        raise SystemExit(f"unknown die point {where!r}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = make_worker(spec)
    worker.stats.on_epoch(lambda report: print(f"frontier {report.upper}", flush=True))
    recovery = worker.recovery
    if recovery is not None:
        written = recovery._written  # announce each checkpoint once the worker has recorded it

        def announce(snapshot) -> None:
            written(snapshot)
            print(f"checkpoint {snapshot.frontier}", flush=True)

        recovery._written = announce
    if spec.get("die"):
        die_at(worker, *spec["die"])
    stop_on_signals(worker)
    worker.open()
    print(f"restored {None if recovery is None or recovery.restored is None else recovery.restored.frontier}",
          flush=True)
    print("ready", flush=True)
    worker.run()
    print(f"exit {worker.frontier}", flush=True)


if __name__ == "__main__":
    main()
