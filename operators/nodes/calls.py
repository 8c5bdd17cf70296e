"""Calls of user functions: where one raises, the error names the operator, the function and the record.

A user function runs once per distinct record (its results are memoized), in bulk: ``list(map(f,
...))``. When it raises, :func:`call_all` calls it again on the same arguments one at a time to find
the first that raises (a deterministic function raises there again), and raises
:class:`~ddflow.operators.errors.UserFunctionError` naming the operator's kind, the function's
qualified name, file and line, and that record, with the function's exception as its cause.
Nothing is paid while no function raises.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

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


def function_label(kind: str, f: Callable) -> str:
    """``kind(qualified name)``, what metrics call an operator of ``kind`` running ``f``
    (``map(parse_view)``); a lambda is named with its file and line too (``map(<lambda> flows.py:12)``),
    since one module holds many."""
    name, where = describe(f)
    if "<lambda>" in name and where != "built-in":
        name = f"{name} {os.path.basename(where)}"
    return f"{kind}({name})"


def failure(operator: str, f: Callable, exc: BaseException, *, record: object = None,
            record_id: int | None = None, time: object = None) -> UserFunctionError:
    """The error to raise ``from exc`` for ``f`` of an ``operator`` raising ``exc``."""
    name, where = describe(f)
    err = UserFunctionError(operator=operator, function=name, where=where, record=record,
                            record_id=record_id, time=time)
    err.__cause__ = exc
    return err


class Quarantine:
    """Where the failures of user functions go under the ``dead_letter`` policy.

    ``policy`` (``"stop"`` or ``"dead_letter"``) holds for every function, except those named in
    ``functions`` (qualified name -> policy). A failure the policy takes is kept in ``failed`` (until
    `drain`), once per function and record however often the record recurs, and the operator treats
    its record as absent: ``map`` and ``flat_map`` give nothing for it, ``filter`` drops it. A user
    function is deterministic and called once per distinct record (memoized), so the record is absent
    at every time, its retractions included, and the rest of the output stays exact. ``join_map``,
    ``reduce``, ``threshold`` and ``inspect`` always stop."""

    POLICIES = ("stop", "dead_letter")

    def __init__(self, policy: str = "stop", functions: Mapping[str, str] | None = None) -> None:
        for name, chosen in {"": policy, **dict(functions or {})}.items():
            if chosen not in self.POLICIES:
                raise ValueError(f"on_error{' for ' + name if name else ''}: {chosen!r} is not one of "
                                 f"{', '.join(self.POLICIES)}")
        self.policy = policy
        self.functions = dict(functions or {})
        self.failed: list[UserFunctionError] = []
        self._seen: set[tuple[str, str]] = set()

    def takes(self, error: UserFunctionError) -> bool:
        """Whether ``error``'s record is to be treated as absent (kept for its dead letter if new)."""
        if self.functions.get(error.function, self.policy) != "dead_letter":
            return False
        key = (f"{error.function} {error.where}", repr(error.record))
        if key not in self._seen:
            self._seen.add(key)
            self.failed.append(error)
        return True

    def drain(self) -> list[UserFunctionError]:
        """The failures taken since the last drain."""
        failed, self.failed = self.failed, []
        return failed


def call_all(operator: str, f: Callable, columns: Sequence[list], ids: np.ndarray | None = None,
             quarantine: Quarantine | None = None, absent: object = None) -> list:
    """``[f(*args) for args in zip(*columns)]``; where ``f`` raises, a named
    :class:`~ddflow.operators.errors.UserFunctionError` (``ids``: the records' ids, one per row, to
    name the record's id too), or ``absent`` in its place when ``quarantine`` takes the failure."""
    try:
        return list(map(f, *columns))
    except DataflowError:
        raise
    except Exception as exc:
        first = exc
    out = []
    raised = False
    for i, args in enumerate(zip(*columns)):
        try:
            out.append(f(*args))
        except DataflowError:
            raise
        except Exception as exc:
            raised = True
            record = args[0] if len(args) == 1 else args
            error = failure(operator, f, exc, record=record, record_id=None if ids is None else int(ids[i]))
            if quarantine is None or operator not in ("map", "filter", "flat_map") or not quarantine.takes(error):
                raise error from exc
            out.append(absent)
    if not raised:
        raise failure(operator, f, first) from first  # it raised once only: not deterministic
    return out
