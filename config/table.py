"""Reading one TOML table of the config: typed getters that record problems instead of raising.

A `Table` knows its dotted path (``inputs[0].fields``), records which keys were consumed and, at
`Table.finish`, reports every other key as unknown with the closest known one. Each getter checks
the value's TOML type and, given ``check``, its content: the checks here return a message (what
is wrong with the value, naming it) or None. `describe` names a value's type without showing a
value that could be a misplaced secret. `parse_duration` and `parse_address` read the two
structured strings the config uses.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import Problem

__all__ = [
    "Table", "check_bootstrap", "check_choice", "check_name", "check_nonempty", "check_positive",
    "check_reference", "check_strings", "check_topic", "check_unique", "describe", "parse_address",
    "parse_duration",
]

T = TypeVar("T")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def parse_duration(text: str) -> int:
    """``"1ms"`` -> 1_000_000 (nanoseconds). Raises ``ValueError`` with the accepted forms."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a duration (write a number and a unit: '500us', '1ms', '2s', '1m')")
    value = float(match.group(1)) * _UNIT_NS[match.group(2)]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of nanoseconds")
    return int(value)


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (``[v6]:port`` too) -> (host, port); port 0 means any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port (e.g. '127.0.0.1:9464', '0.0.0.0:9464')")
    return host.strip("[]"), int(port)


# -- value checks: return an error message or None ------------------------------------------------


def check_reference(value: str) -> str | None:
    if not _REFERENCE.match(value):
        return f"{value!r} is not a 'module:function' reference (e.g. 'mypkg.flows:build')"
    return None


def check_bootstrap(value: str) -> str | None:
    for server in value.split(","):
        try:
            parse_address(server.strip())
        except ValueError:
            return f"{value!r} is not a comma-separated list of host:port"
    return None


def check_name(value: str) -> str | None:
    return None if _NAME.match(value) else f"{value!r} is not a name (letters, digits, '_', '.', '-')"


def check_topic(value: str) -> str | None:
    return None if _TOPIC.match(value) else f"{value!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)"


def check_nonempty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def check_positive(value: int) -> str | None:
    return None if value > 0 else f"{value} must be greater than 0"


def check_strings(value: list[Any]) -> str | None:
    return None if all(isinstance(v, str) for v in value) else "must be a list of strings"


def check_choice(options: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value in options:
            return None
        return f"{value!r} is not one of {', '.join(repr(o) for o in options)}"

    return check


def check_unique(problems: list[Problem], section: str, values: list[str], key: str) -> None:
    seen: dict[str, int] = {}
    for n, v in enumerate(values):
        if v in seen and v:
            problems.append(Problem(f"{section}[{n}].{key}", f"{v!r} is already used by {section}[{seen[v]}]"))
        seen.setdefault(v, n)


# -- the reader -----------------------------------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false",
               list: "an array", dict: "a table"}


class Table:
    """A TOML table with its dotted path: typed getters that record problems instead of raising."""

    def __init__(self, data: Any, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        self.failed = False
        self._seen: set[str] = set()
        if not isinstance(data, dict):
            self._fail(path, f"must be a table, not {describe(data, show=False)}")
            data = {}
        self.data: dict[str, Any] = data

    def key(self, name: str) -> str:
        """Dotted TOML path; names that are not bare keys are quoted (``kafka.options."sasl.password"``)."""
        if not re.match(r"^[A-Za-z0-9_-]+$", name):
            name = f'"{name}"'
        return f"{self.path}.{name}" if self.path else name

    def keys(self) -> list[str]:
        return list(self.data)

    def _fail(self, key: str, message: str) -> None:
        self.failed = True
        self.problems.append(Problem(key, message))

    def get(self, name: str, kind: type | tuple[type, ...], default: T, *, required: bool = False,
            check: Callable[[Any], str | None] | None = None) -> Any:
        self._seen.add(name)
        if name not in self.data:
            if required:
                self._fail(self.key(name), "is required")
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int subclass in Python; TOML keeps them apart, and so do we
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self._fail(self.key(name), f"must be {wanted}, not {describe(value)}")
            return default
        if check is not None and (message := check(value)) is not None:
            self._fail(self.key(name), message)
            return default
        return value

    def duration(self, name: str, default: T) -> int | T:
        text = self.get(name, str, None)
        if text is None:
            return default
        try:
            return parse_duration(text)
        except ValueError as exc:
            self._fail(self.key(name), str(exc))
            return default

    def table(self, name: str, *, required: bool = False) -> Table:
        self._seen.add(name)
        if name not in self.data:
            if required:
                self._fail(self.key(name), "is required (a table)")
            return Table({}, self.key(name), self.problems)
        return Table(self.data[name], self.key(name), self.problems)

    def tables(self, name: str, *, required: bool = False) -> list[Table]:
        self._seen.add(name)
        key = self.key(name)
        value = self.data.get(name)
        if value is None:
            if required:
                self._fail(key, f"is required: add at least one [[{key}]] table")
            return []
        if not isinstance(value, list) or not value:
            self._fail(key, f"must be one or more [[{key}]] tables, not {describe(value)}")
            return []
        return [Table(item, f"{key}[{n}]", self.problems) for n, item in enumerate(value)]

    def finish(self) -> None:
        """Report every key that no getter consumed, suggesting the closest known key."""
        known = sorted(self._seen)
        for name in self.data:
            if name not in self._seen:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(known)})"
                self.problems.append(Problem(self.key(name), "unknown key" + hint))


def describe(value: Any, *, show: bool = True) -> str:
    """``a string ('x')``; ``show=False`` where the value could be a misplaced secret."""
    for kind, name in _TYPE_NAMES.items():
        if type(value) is kind:
            return f"{name} ({value!r})" if show and kind in (str, int, float, bool) else name
    return type(value).__name__
