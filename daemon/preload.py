"""Loading the compiler of the engine's kernels while `ddflow run` connects to Kafka.

The engine's kernels are compiled by numba and loaded from its on-disk cache on first use, but
before the first kernel runs numba itself must be imported (~0.3-0.5 s on two shared cores) and
must fill its typing and lowering registries (~0.3 s more, at the first kernel call). A daemon
otherwise pays both on its critical path: numba is imported when the dataflow is built, the
registries are filled by the first input message decoded. Meanwhile, it spends about as long
waiting for the broker (the output producer's transactions, reading the result topics back, the
input consumer's first fetch), with the GIL released.

`start` does both in a thread of its own, begun when `ddflow run` starts, so they overlap those
waits. It touches numba only (no ddflow module: the main thread imports those, and two threads
importing the same modules in different orders could deadlock on the import locks); the main
thread's own import of numba waits for the thread's, and numba's registries are filled under its
global compiler lock, which every compilation and cache load takes, so nothing sees them half
filled. A failure here changes nothing: the main thread imports numba and fills its registries
itself, as it would without the thread.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["start", "preload"]

log = logging.getLogger("ddflow.daemon.preload")


def preload() -> float:
    """Import numba and fill its CPU target's registries (what the first kernel call would do);
    returns the seconds it took."""
    started = time.perf_counter()
    import numba  # noqa: F401
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        cpu_target.target_context.refresh()
    return time.perf_counter() - started


def start() -> threading.Thread:
    """Run `preload` in a daemon thread named ``ddflow-preload``; returns the thread (started)."""

    def run() -> None:
        try:
            log.debug("numba loaded in the background in %.3f s", preload())
        except Exception as exc:  # the main thread loads it itself on first use
            log.warning("loading numba in the background failed (it loads on first use instead): %s: %s",
                        type(exc).__name__, exc)

    thread = threading.Thread(target=run, name="ddflow-preload", daemon=True)
    thread.start()
    return thread
