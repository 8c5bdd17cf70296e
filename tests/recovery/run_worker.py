"""A worker process for the crash tests: ``python run_worker.py '<json spec>'`` (see
`recovery_support.worker_spec`; ``worker`` holds checkpoint options for `Worker`).

It prints ``ready`` once open, ``restored F`` (the snapshot frontier restored, or None),
``frontier t`` after every epoch, ``checkpoint F`` after every checkpoint written and ``exit t``
when it stops on SIGTERM.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recovery_support import make_worker  # noqa: E402

from ddflow.daemon.worker import stop_on_signals  # noqa: E402


def main() -> None:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = make_worker(spec)
    worker.stats.on_epoch(lambda report: print(f"frontier {report.upper}", flush=True))
    recovery = worker.recovery
    if recovery is not None:
        checkpoint = recovery.checkpoint

        def checkpoint_and_report(frontier, offsets):  # type: ignore[no-untyped-def]
            written = checkpoint(frontier, offsets)
            print(f"checkpoint {written.frontier}", flush=True)
            return written

        recovery.checkpoint = checkpoint_and_report  # type: ignore[method-assign]
    stop_on_signals(worker)
    worker.open()
    print(f"restored {None if recovery is None or recovery.restored is None else recovery.restored.frontier}",
          flush=True)
    print("ready", flush=True)
    worker.run()
    print(f"exit {worker.frontier}", flush=True)


if __name__ == "__main__":
    main()
