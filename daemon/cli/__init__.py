"""The ``ddflow`` command line: the parser and dispatch (`parser`), the commands (`commands`), the
demo (`demo`) and the signal handling of a foreground run (`signals`).

`main` is the console script (``ddflow = "ddflow.daemon.cli:main"``); it loads the parser on call,
and commands import what they run lazily, so that ``ddflow --help`` and the light commands stay
light. The top layer: may import any part of the daemon.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ddflow`` command line with ``argv`` (default: the process's); the exit code."""
    from .parser import main as run

    return run(argv)
