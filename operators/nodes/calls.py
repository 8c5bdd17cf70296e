"""Calls of user functions: where one raises, the error names the operator, the function and the record.

A user function runs once per distinct record (its results are memoized), in bulk: ``list(map(f,
...))``. When it raises, :func:`call_all` calls it again on the same arguments one at a time to find
the first that raises (a deterministic function raises there again), and raises
:class:`~ddflow.operators.errors.UserFunctionError` naming the operator's kind, the function's
qualified name, file and line, and that record, with the function's exception as its cause.
Nothing is paid while no function raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import DataflowError, UserFunctionError


def describe(f: Callable) -> tuple[str, str]:
    """``(qualified name, "file:line")`` of a user function (its ``__call__``'s for a callable object)."""
    target = getattr(f, "__func__", f)
    code = getattr(target, "__code__", None)
    if code is None and not isinstance(f, type):
        call = getattr(type(f), "__call__", None)
        code = getattr(call, "__code__", None)
    name = getattr(target, "__qualname__", None) or type(f).__qualname__
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "built-in"
    return name, where


def failure(operator: str, f: Callable, exc: BaseException, *, record: object = None,
            record_id: int | None = None, time: object = None) -> UserFunctionError:
    """The error to raise ``from exc`` for ``f`` of an ``operator`` raising ``exc``."""
    name, where = describe(f)
    err = UserFunctionError(operator=operator, function=name, where=where, record=record,
                            record_id=record_id, time=time)
    err.__cause__ = exc
    return err


def call_all(operator: str, f: Callable, columns: Sequence[list], ids: np.ndarray | None = None) -> list:
    """``[f(*args) for args in zip(*columns)]``; where ``f`` raises, a named
    :class:`~ddflow.operators.errors.UserFunctionError` (``ids``: the records' ids, one per row, to
    name the record's id too)."""
    try:
        return list(map(f, *columns))
    except DataflowError:
        raise
    except Exception as exc:
        first = exc
    for i, args in enumerate(zip(*columns)):
        try:
            f(*args)
        except Exception as exc:
            record = args[0] if len(args) == 1 else args
            raise failure(operator, f, exc, record=record,
                          record_id=None if ids is None else int(ids[i])) from exc
    raise failure(operator, f, first) from first  # it raised once only: not deterministic
