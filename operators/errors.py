"""Engine exceptions.

    DdflowError                 root of every ddflow error (`ddflow.operators.root_error`)
    DataflowError               root of every engine error
    ├── TimeError               a time behind an input's frontier, advance_to backwards, a bad time value
    ├── DiffError               a diff that is not a non-zero int, or diffs summing outside int64
    ├── ShapeError              a record of the wrong shape for a keyed operator, or unhashable
    ├── IncompleteTimeError     capture.at(t) for a time that is not complete yet
    ├── GraphError              misuse of the dataflow graph (closed input, collection from another scope)
    ├── CompactionError         a trace handle's frontier moved backwards, or a dropped handle used
    ├── ConfigurationError      an engine tuning knob out of its range
    ├── IdLimitError            more distinct records (and their parts) alive at once than ids
    ├── IterationLimitError     a loop still had work at its ``iterate(..., max_iterations=n)`` limit
    ├── UserFunctionError       a user function raised on a record (operator, function and record named)
    └── TransportAborted        another worker failed, so an exchange with it cannot complete
"""

from __future__ import annotations

from .root_error import DdflowError


class DataflowError(DdflowError):
    """Root of ddflow engine errors."""


class TimeError(DataflowError):
    """A time that the input's frontier or the time domain does not allow."""


class DiffError(DataflowError):
    """A diff that is not a non-zero integer, or diffs whose sum leaves int64 (never wrapped).

    For a sum, ``record_ids`` holds the record's interned ids (one per data column: the record, or
    its key and val) and ``time`` its time; the scheduler names the operator and the record's value
    in the message (``operator`` is then set)."""

    def __init__(self, message: str, *, record_ids: tuple[int, ...] | None = None,
                 time: tuple[int, ...] | None = None, operator: str | None = None) -> None:
        super().__init__(message)
        self.record_ids, self.time, self.operator = record_ids, time, operator


class ShapeError(DataflowError):
    """A record whose shape does not fit the operator (e.g. not a (key, val) pair)."""


class IncompleteTimeError(DataflowError):
    """A query for a time the output frontier has not passed yet."""


class GraphError(DataflowError):
    """Misuse of the dataflow graph."""


class CompactionError(DataflowError, ValueError):
    """A reader's compaction frontier that would go backwards, or a dropped handle in use."""


class ConfigurationError(DataflowError, ValueError):
    """An :class:`~ddflow.operators.tuning.EngineConfig` knob out of its range."""


class IdLimitError(DataflowError):
    """The dataflow holds more distinct records (counting the pairs inside them and their components)
    than record ids can number (``2**31``): ids are given back when no state holds their record, so
    this means the live state itself is that large."""


class IterationLimitError(DataflowError):
    """A loop built with ``iterate(body, max_iterations=n)`` still had work at iteration ``n``: for
    the inputs given, iterating ``body`` reaches no fixed point (e.g. negative multiplicities fed to a
    step that clamps, such as ``distinct``, can make the iterates oscillate for ever) or needs more
    iterations than allowed. ``iteration`` is the iteration the work was at, ``limit`` the limit.
    Raised by the ``run()`` or ``step()`` that reached it; the dataflow is not usable afterwards."""

    def __init__(self, message: str, *, iteration: int, limit: int) -> None:
        super().__init__(message)
        self.iteration, self.limit = iteration, limit


class TransportAborted(DataflowError):
    """Another worker of the same dataflow failed: an exchange or agreement with it cannot complete
    (the worker that failed raises its own error)."""


class UserFunctionError(DataflowError):
    """A user function (of ``map``, ``filter``, ``flat_map``, ``inspect``, ``join_map``, ``reduce``,
    ``threshold``) raised. ``operator`` is the operator's kind, ``function`` the function's qualified
    name with its file and line (``where``), ``record`` the argument(s) it raised on (``None`` when
    not known), ``time`` the record's time when the operator knows it; ``name`` the name the user
    gave the operator (``Collection.name``), ``reading`` those of the arrangements it reads
    (``Arranged.name``, or a named collection's ``name.by_key``), once the engine located it; the
    function's own exception is the ``__cause__``, with its traceback. The dataflow is not usable
    afterwards."""

    def __init__(self, *, operator: str, function: str, where: str, record: object = None,
                 time: object = None, record_id: int | None = None) -> None:
        self.operator, self.function, self.where = operator, function, where
        self.record, self.time, self.record_id = record, time, record_id
        self.name: str | None = None
        self.reading: tuple[str, ...] = ()
        self.located = False  # the node that raised it set name and reading (`graph.locate_failure`)
        super().__init__(self._message())

    def _message(self) -> str:
        cause = self.__cause__
        what = f"{type(cause).__name__}: {cause}" if cause is not None else "an exception"
        on = "" if self.record is None else f" on the record {self.record!r:.200}"
        at = "" if self.time is None else f" at time {self.time}"
        named = "" if self.name is None else f" in {self.name!r}"
        if self.reading:
            named += " reading " + ", ".join(map(repr, self.reading))
        return f"{self.operator} function {self.function} ({self.where}){named} raised {what}{on}{at}"

    def __str__(self) -> str:  # the cause is chained after __init__: said once it is known
        return self._message()
