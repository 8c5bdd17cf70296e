"""Configuration errors (and a re-export of the root of every ddflow error).

    DdflowError                 root of every error ddflow raises (engine, config, daemon)
    ├── DataflowError           the engine's (`ddflow.operators.errors`)
    ├── ConfigError             root of this package; one or more Problems in one file
    │     (raised by the loader, the schema, secret resolution and dataflow references)
    └── DaemonError             the daemon's (`ddflow.daemon.exceptions`)

`DdflowError` lives in :mod:`ddflow.operators.root_error`, a module that imports nothing (so
``ddflow --help`` stays light); this module, ``ddflow.operators`` and ``ddflow.daemon`` re-export
it. ``except DdflowError`` catches every error that names a ddflow step; anything else escaping
ddflow is a bug.

A config file is checked as a whole, so one ConfigError can carry several Problems; its message
lists each as ``FILE: KEY: PROBLEM``, the form an operator can grep for and fix in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..operators.root_error import DdflowError

__all__ = ["ConfigError", "DdflowError", "Problem"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one key (``key`` is a dotted path such as ``inputs[0].late``)."""

    key: str
    message: str

    def render(self, source: str) -> str:
        return f"{source}: {self.key}: {self.message}"


class ConfigError(DdflowError):
    """A configuration file (or one of its references) is invalid.

    ``source`` is the file, ``problems`` the list of (key, message) pairs found in it.
    """

    def __init__(self, source: str | Path, problems: list[Problem]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.source = str(source)
        self.problems = list(problems)
        super().__init__("\n".join(p.render(self.source) for p in self.problems))

    @classmethod
    def one(cls, source: str | Path, key: str, message: str) -> ConfigError:
        return cls(source, [Problem(key, message)])

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.problems]
