"""Durable local files: what makes a file created or renamed in a directory survive a crash.

A file is durable once its bytes are fsynced and then the directory that names it is fsynced
(`fsync_dir`), after the create or rename: the snapshot writer and the inputs' floor and
reclock logs write this way.

Those two logs are JSON lines (one object a line, a header object first) kept the same way: new
lines appended and fsynced (`append_json_lines`), the whole log replaced atomically when it is
compacted (`replace_json_lines`), and read back with a torn last line (a crash while appending)
ignored (`read_json_lines`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .exceptions import SnapshotError

__all__ = ["append_json_lines", "fsync_dir", "read_json_lines", "replace_json_lines"]


def fsync_dir(path: Path) -> None:
    """Flush directory ``path``'s entries (a file just created or renamed in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_json_lines(path: Path, header: dict[str, Any], rows: Iterable[dict[str, Any]]) -> None:
    """Append ``rows`` to the log at ``path``, one JSON object a line, and fsync it; a log this call
    creates starts with ``header``, and its directory entry is fsynced too."""
    fresh = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        if fresh:
            f.write(json.dumps(header) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if fresh:
        fsync_dir(path.parent)


def replace_json_lines(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Make the log at ``path`` hold exactly ``rows`` (its header first), durably: written to a
    temporary file beside it, fsynced, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json_lines(path: Path, what: str, apply: Callable[[int, Any], None]) -> bool:
    """Call ``apply(number, obj)`` for each complete line of the log at ``path`` (numbered from 1),
    in order. A line that is not JSON, or that ``apply`` refuses with ValueError, KeyError,
    TypeError or AttributeError, raises `SnapshotError` naming ``what``, the file and the line.
    Returns whether the last line was torn (no newline): the caller rewrites the log without it."""
    lines = path.read_bytes().split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    for number, line in enumerate(complete, 1):
        try:
            apply(number, json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SnapshotError(f"{what} {path} line {number}: {line[:120]!r} is corrupt ({exc})") from exc
    return bool(tail)
