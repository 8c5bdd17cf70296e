"""Dataflow references: ``"module:function"`` in a config, resolved to the function it names.

The function has the signature ``function(df, inputs, **args) -> outputs``: ``df`` is a
``ddflow.operators.Dataflow``, ``inputs`` maps each configured input name to its collection, ``args``
are the config's ``[dataflow.args]``, and the result maps each configured output name to a
collection. ``build_dataflow`` calls it and checks that exactly the configured outputs come back,
so ``ddflow check-config`` catches a mismatch before any broker is involved.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError
from .schema import Config

__all__ = ["resolve_dataflow", "build_dataflow"]

KEY = "dataflow.function"


def resolve_dataflow(config: Config) -> Callable[..., Any]:
    """Import the configured function; a ``ConfigError`` on ``dataflow.function`` says what failed."""
    module_name, _, attribute = config.dataflow.function.partition(":")
    for directory in reversed(config.dataflow.path):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError.one(
            config.source, KEY, f"cannot import module {module_name!r}: {exc} "
            "(is it installed, or listed under dataflow.path?)"
        ) from exc
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError.one(
            config.source, KEY, f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigError.one(
                config.source, KEY, f"module {module_name!r} has no attribute {attribute!r}"
            ) from exc
    if not callable(target):
        raise ConfigError.one(config.source, KEY, f"{config.dataflow.function!r} is not callable")
    function: Callable[..., Any] = target
    _check_signature(config, function)
    return function


def _check_signature(config: Config, function: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # builtins and C functions: nothing to check
    try:
        signature.bind(object(), {}, **config.dataflow.args)
    except TypeError as exc:
        raise ConfigError.one(
            config.source, KEY,
            f"{config.dataflow.function} cannot be called as function(df, inputs"
            f"{''.join(', ' + k + '=...' for k in config.dataflow.args)}): {exc}",
        ) from exc


def build_dataflow(config: Config, df: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Call the configured function on ``df`` and ``inputs``; return its outputs by name.

    Raises ``ConfigError`` (key ``dataflow.function``) when it raises, returns something other
    than a mapping, or returns names other than the configured outputs.
    """
    function = resolve_dataflow(config)
    try:
        outputs = function(df, dict(inputs), **config.dataflow.args)
    except Exception as exc:
        raise ConfigError.one(
            config.source, KEY, f"{config.dataflow.function} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(outputs, Mapping):
        raise ConfigError.one(
            config.source, KEY,
            f"{config.dataflow.function} returned {type(outputs).__name__}, expected a dict of output collections",
        )
    wanted = {o.name for o in config.outputs}
    got = set(outputs)
    if got != wanted:
        missing = ", ".join(sorted(wanted - got)) or "none"
        extra = ", ".join(sorted(map(str, got - wanted))) or "none"
        raise ConfigError.one(
            config.source, KEY,
            f"{config.dataflow.function} returned outputs {sorted(map(str, got))} but [[outputs]] names "
            f"{sorted(wanted)} (missing: {missing}; not configured: {extra})",
        )
    return dict(outputs)
