"""Durable local files: what makes a file created or renamed in a directory survive a crash.

A file is durable once its bytes are fsynced and then the directory that names it is fsynced
(`fsync_dir`), after the create or rename: the snapshot writer and the inputs' floor and
reclock logs write this way.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir"]


def fsync_dir(path: Path) -> None:
    """Flush directory ``path``'s entries (a file just created or renamed in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
