"""Loading a snapshot's inputs in a background thread, while the worker already consumes live input.

A `SnapshotLoader` starts reading when it is built; the worker polls `done` (or waits a bounded
time with `wait`) between its epochs and takes `result` once. A caller may assume the thread only
reads the snapshot (Parquet decoding releases the GIL, so live intake goes on meanwhile), that
`result` gives, per input name, the collection below the snapshot's frontier (``base``, every
update at ``frontier - 1``) and its ``pending`` updates, each a column `Block` read with no row in
between (`Snapshot.read_blocks`), and that any failure of the load is raised there, in the
caller's thread, as a `RecoveryError` naming the snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ..block import Block
from ..exceptions import RecoveryError
from .snapshot import Snapshot

__all__ = ["Loaded", "SnapshotLoader"]

Loaded = dict[str, tuple[Block, Block]]  # input name -> (base, pending)


class SnapshotLoader:
    """Reads a snapshot's inputs in a background thread (Parquet decoding releases the GIL)."""

    def __init__(self, snapshot: Snapshot, names: Sequence[str], *, owner: tuple[int, int] | None = None) -> None:
        """``owner``: ``(i, W)`` to read only worker i's share of each input (`Snapshot.read_blocks`)."""
        self.snapshot = snapshot
        self.names = list(names)
        self.owner = owner
        self.started = time.perf_counter()
        self.seconds: float | None = None
        self._result: Loaded | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._load, name="ddflow-snapshot-loader", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            self._result = {name: self.snapshot.read_blocks(name, owner=self.owner) for name in self.names}
        except BaseException as exc:  # re-raised by result() in the worker's thread
            self._error = exc
        self.seconds = time.perf_counter() - self.started

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the load to finish."""
        self._thread.join(timeout)

    def result(self, timeout: float | None = None) -> Loaded:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RecoveryError(f"loading {self.snapshot}: not done after {timeout} s")
        if self._error is not None:
            error = self._error
            raise RecoveryError(f"loading {self.snapshot}: {type(error).__name__}: {error}") from error
        assert self._result is not None
        return self._result
