"""The ``ddflow`` command line: the parser and dispatch (`parser`), the commands (`commands`), the
demo (`demo`) and the signal handling of a foreground run (`signals`).

`main` is the console script (``ddflow = "ddflow.daemon.cli:main"``); it loads the parser on call,
and commands import what they run lazily, so that ``ddflow --help`` and the light commands stay
light. The top layer: may import any part of the daemon.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["BLAS_THREADS", "HUGE_PAGES", "main"]

# numpy's BLAS starts a pool of one thread per core at import, and each new pool spins on a core
# for about 0.1 s before it sleeps: on a 16-core host that is ~1.5 s of CPU per process, for a
# library no command of ddflow calls (the engine's work is integer kernels). One thread, unless
# the environment says otherwise.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")

# numpy asks the kernel for transparent huge pages for every array of 4 MiB or more (madvise). Where
# the kernel's THP defrag setting is "madvise" (common), each first touch of such an array may stall
# in a synchronous memory compaction, and on a host whose memory is fragmented those stalls dominate:
# a 1M-node reachability load took 10.9 s of CPU with them and 9.2 s without, interning 10M ints
# 1.5-1.9 s against 0.9 s; epochs of small arrays are unaffected. Off, unless the environment says.
HUGE_PAGES = "NUMPY_MADVISE_HUGEPAGE"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ddflow`` command line with ``argv`` (default: the process's); the exit code."""
    for name in BLAS_THREADS:  # before numpy is imported (nothing above imports it)
        os.environ.setdefault(name, "1")
    os.environ.setdefault(HUGE_PAGES, "0")
    from .parser import main as run

    return run(argv)
