"""One test process at a time: the suite runs in several processes (pytest-xdist), and what a
fixture sets up once for a machine (a tool downloaded into the pytest cache, a package installed
with apt-get) must not be set up by two of them at once.

Imported by name (``from support.locks import machine_lock``).
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide lock ``name`` (a file in the temp directory, locked with ``flock``) for
    the ``with`` block: another process asking for it waits until this one leaves the block."""
    path = Path(tempfile.gettempdir()) / f"ddflow-tests-{name}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
