"""The commit window, and commits that run while the next epochs compute.

Short epochs must not pay a commit each while input keeps coming (a Kafka transaction costs broker
round trips whatever its size). A sink adds every epoch it publishes to its window and commits the
window (outputs, progress markers, dead letters and the consumed input offsets of all its epochs,
at once) when ``commit_interval`` seconds have passed since the window's first epoch, when the
worker has read all the input there is (`WindowCommits.maybe_commit` with ``idle``: an idle period
does not wait out the interval), when the worker stops, and before a checkpoint is written.
Like Kafka Streams' ``commit.interval.ms`` under exactly-once: an
epoch's output is final when the commit holding it lands, never before, and a crash before that
loses nothing (the input offsets were not committed either, so the epochs are computed again).
An interval of 0 commits every epoch as soon as the commit before it has landed.

A commit does not stop the worker: `Committer` runs it in a thread of its own while the worker
computes the next epochs, which go into the next window (`CommitWindow.take` hands the window
over and starts a new one). At most one commit is in flight; a window that becomes due meanwhile
waits for it and then commits whatever it holds by then. The sink learns the outcome in the
worker's thread (`Committer.result`): only then are the window's epochs final (reported, marked
final, their offsets the committed ones); a failed commit raises there, and nothing of it nor of
the later windows is committed (a restart computes them again from the committed offsets).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import OptionsError

__all__ = ["CommitWindow", "Committer", "Window", "WindowCommits"]


@dataclass
class Window:
    """A window handed over for commit: its epochs' ``items`` in order, the range ``[lower, upper)``
    they cover (``upper`` None: final forever), how many ``epochs``, the newest input ``offsets``,
    and ``extra``, whatever else the sink commits with it (e.g. its staged dead letters)."""

    items: list[Any] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    lower: int | None = None
    upper: int | None = None
    epochs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The epochs of the window, for messages: ``epoch [l, u)`` or ``epochs [l, u) (n)``."""
        if self.epochs == 0:
            return "dead letters"
        if self.epochs == 1:
            return f"epoch [{self.lower}, {self.upper})"
        return f"epochs [{self.lower}, {self.upper}) ({self.epochs})"


class CommitWindow:
    """What a sink published and has not handed over for commit yet: ``items`` (whatever the sink
    commits per epoch, in order), the range ``[lower, upper)`` they cover and the newest input
    ``offsets``."""

    def __init__(self, interval: float) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval >= 0:
            raise OptionsError(f"commit_interval: expected seconds >= 0, got {interval!r}")
        self.interval = float(interval)
        self._open = Window()
        self._since: float | None = None

    @property
    def items(self) -> list[Any]:
        return self._open.items

    @property
    def offsets(self) -> dict[tuple[str, int], int]:
        return self._open.offsets

    @property
    def lower(self) -> int | None:
        return self._open.lower

    @property
    def upper(self) -> int | None:
        return self._open.upper

    @property
    def epochs(self) -> int:
        return self._open.epochs

    def add(self, lower: int, upper: int | None, items: list[Any], offsets: Mapping[tuple[str, int], int] | None) -> None:
        """One more epoch ``[lower, upper)``, its ``items`` and the input offsets consumed up to it."""
        window = self._open
        if self._since is None:
            self._since = time.monotonic()
            window.lower = lower
        window.items.extend(items)
        window.offsets.update(offsets or {})
        window.upper = upper
        window.epochs += 1

    def age(self) -> float:
        """Seconds since the window's first epoch (0 when empty)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def due(self) -> bool:
        """Whether the window holds epochs and its interval has passed."""
        return self._open.epochs > 0 and self.age() >= self.interval

    def take(self) -> Window:
        """The window as it is (to be committed); an empty one starts."""
        window, self._open, self._since = self._open, Window(), None
        return window

    def clear(self) -> None:
        """Forget the window."""
        self.take()

    def describe(self) -> str:
        """The epochs of the window, for messages: ``epoch [l, u)`` or ``epochs [l, u) (n)``."""
        return self._open.describe()


class Committer:
    """Runs one commit at a time in a thread of its own (``background``; else in the caller's).

    `start` hands it a commit (a function doing the blocking work and returning what the caller
    needs to apply once it landed); `done` says whether it finished; `result` waits for it and
    returns its value, or raises its exception, in the caller's thread. A caller applies a commit's
    outcome only through `result`, so all of a sink's state is changed by the worker's thread. The
    thread is started with the first commit and lives as long as the process (a daemon thread,
    idle between commits); starting a commit does not wait for it to be scheduled.
    """

    def __init__(self, name: str = "ddflow-commit", *, background: bool = True) -> None:
        self.name = name
        self.background = background
        self._thread: threading.Thread | None = None
        self._jobs: list[Callable[[], Any]] = []
        self._wake = threading.Condition()
        self._finished = threading.Event()
        self._box: list[tuple[bool, Any]] = []
        self._busy = False

    @property
    def busy(self) -> bool:
        """Whether a commit was started and its result not taken yet."""
        return self._busy

    def start(self, commit: Callable[[], Any]) -> None:
        """Run ``commit()`` (in the background, or now); `result` gives its outcome."""
        if self._busy:
            raise RuntimeError("Committer.start: a commit is in flight (take its result first)")
        self._busy = True
        self._box = []
        self._finished.clear()
        if not self.background:
            self._run(commit)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        with self._wake:
            self._jobs.append(commit)
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._jobs:
                    self._wake.wait()
                commit = self._jobs.pop()
            self._run(commit)

    def _run(self, commit: Callable[[], Any]) -> None:
        try:
            self._box.append((True, commit()))
        except BaseException as exc:  # raised by result() in the caller's thread
            self._box.append((False, exc))
        self._finished.set()

    def done(self) -> bool:
        """Whether the commit in flight finished (True when there is none)."""
        return not self._busy or self._finished.is_set()

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the commit in flight (at most ``timeout`` seconds: `TimeoutError`) and return
        its value, or raise its exception; the committer is then free again."""
        if not self._busy:
            raise RuntimeError("Committer.result: no commit in flight")
        if not self._finished.wait(timeout):
            raise TimeoutError(f"{self.name}: the commit in flight did not finish within {timeout} s")
        self._busy = False
        ok, value = self._box[0]
        self._box = []
        if not ok:
            raise value
        return value


class WindowCommits:
    """When a sink commits: the two entry points every sink with a commit window shares.

    The sink provides ``_commits`` (its `Committer`), ``_window`` (its `CommitWindow`), ``_staged``
    (dead letters waiting for a commit), ``_start()`` (hand the window to the committer) and
    ``_collect()`` (wait for the commit in flight and take its outcome: whether it landed)."""

    _commits: Committer
    _window: CommitWindow
    _staged: list

    def _start(self) -> None:
        raise NotImplementedError

    def _collect(self) -> bool:
        raise NotImplementedError

    def maybe_commit(self, idle: bool = False) -> bool:
        """Take the outcome of a commit that finished (raising its failure), and start committing
        the window if no commit is in flight and its interval has passed, or at once when ``idle``
        (the caller has read all the input there is: waiting would batch nothing, it would only
        delay the epochs' outputs); whether a commit landed."""
        landed = self._commits.busy and self._commits.done() and self._collect()
        if not self._commits.busy and (self._window.due() or (idle and self._window.epochs > 0)):
            self._start()
            if self._commits.done():  # it ran in this thread (or was that quick)
                landed = self._collect()
        return landed

    def commit(self) -> bool:
        """Commit the window's epochs and the staged dead letters now, after the commit in flight,
        and wait for both; whether anything landed."""
        landed = self._commits.busy and self._collect()
        if not self._window.epochs and not self._staged:
            return landed
        self._start()
        return self._collect()
