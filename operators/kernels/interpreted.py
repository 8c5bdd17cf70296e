"""Kernels run as Python while they compile: the engine's first tier on a cold cache.

Every kernel is a plain Python function before numba compiles it, and as Python it computes the
same thing: its loops index numpy arrays, whose scalars wrap on overflow as compiled int64 and
uint64 arithmetic does (the warnings numpy gives for that are silenced), and the one construct
Python lacks, a column by address (:func:`~.address.column`), has a twin in Python; so does the
consolidation, whose loops numpy's sort replaces (its share of a first run's Python epochs was ~40%). So on a cold
cache the engine need not wait for the compilation (~50 s of CPU on two cores) before its first
epoch: :func:`interpret` makes the kernels it names run as Python until :meth:`Interpreting.compiled`
says another process has written one to numba's cache. The next call of that kernel then loads its
machine code, and every call after runs it with nothing of this module in the way: numba's
dispatcher finds the compiled specialisation in C and never asks again.

How: a dispatcher that finds no compiled specialisation for a call's argument types asks its
``_compile_for_args`` for something to call. While a kernel is interpreted, that answer is the
kernel's *twin*: its Python function with every compiled function it names (helpers, inlined or
not) replaced by their own twins, so that a kernel running as Python calls Python throughout.

What a caller may assume: the same results, bit for bit, from a kernel as Python and compiled
(``tests/kernels/test_interpreted.py`` runs the kernels' property tests against the twins and whole
dataflows both ways, switching tier in the middle of a run); a twin runs about 100-1,000 times
slower than the machine code, which on a first run's small epochs is seconds against the minute a
cold compilation takes.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import threading
import types
from collections.abc import Callable, Iterable

import numpy as np
from numba.core.dispatcher import Dispatcher

_TWINS: dict[int, tuple[Dispatcher, Callable]] = {}  # id(dispatcher) -> (the dispatcher, its twin)
_TIERS: list[Interpreting] = []  # every tier of this process (:func:`interpret`'s)
_LOCK = threading.Lock()


def twin(dispatcher: Dispatcher) -> Callable:
    """The Python that ``dispatcher``'s function runs as: its ``python_twin`` if it has one (numpy in
    place of a loop Python would run slowly, or a function whose body Python cannot run), else
    :func:`python_of` it. Made once per dispatcher."""
    own = dispatcher.__dict__.get("python_twin")
    return own if own is not None else python_of(dispatcher)


def python_of(dispatcher: Dispatcher) -> Callable:
    """``dispatcher``'s Python function reading, in place of every compiled function its module
    names, that function's :func:`twin`. Made once per dispatcher."""
    entry = _TWINS.get(id(dispatcher))
    if entry is not None:
        return entry[1]
    fn = dispatcher.py_func
    scope: dict = {}
    made = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    made.__kwdefaults__, made.__qualname__, made.__doc__ = fn.__kwdefaults__, fn.__qualname__, fn.__doc__
    made.__module__ = fn.__module__
    _TWINS[id(dispatcher)] = (dispatcher, made)  # before its callees: a function that names itself
    for name, value in fn.__globals__.items():
        scope[name] = twin(value) if isinstance(value, Dispatcher) else value
    return made


def _quiet(fn: Callable) -> Callable:
    """``fn`` with numpy's overflow warnings silenced: compiled code wraps without a word."""

    @functools.wraps(fn)
    def run(*args):
        with np.errstate(over="ignore"):
            return fn(*args)

    return run


def dispatchers(packages: Iterable[str]) -> dict[str, Dispatcher]:
    """Every compiled function defined at the top of a module of ``packages`` (their subpackages
    included), kernels and helpers alike, by ``"package.module.function"`` (imports the modules)."""
    out = {}
    for package in packages:
        path = importlib.import_module(package).__path__
        names = [package] + [info.name for info in pkgutil.walk_packages(path, f"{package}.")]
        for module_name in names:
            module = importlib.import_module(module_name)
            for attribute, value in vars(module).items():
                if isinstance(value, Dispatcher) and value.py_func.__module__ == module_name:
                    out[f"{module_name}.{attribute}"] = value
    return out


class Interpreting:
    """The kernels of a process that run as Python until compiled elsewhere: made by
    :func:`interpret`, told by :meth:`compiled` (from any thread) when a kernel is in the cache."""

    def __init__(self) -> None:
        self._ready: set[str] = set()
        self._done = False  # every kernel compiled: the helpers compile as without a tier
        self._kernels: dict[str, Dispatcher] = {}
        self.calls = 0  # kernel calls answered with a twin (not their helpers' calls)

    def _answer(self, qualname: str | None, dispatcher: Dispatcher, python: Callable) -> Callable:
        original = type(dispatcher)._compile_for_args.__get__(dispatcher)

        def compile_for_args(*args, **kws):
            if qualname in self._ready if qualname is not None else self._done:
                dispatcher.__dict__.pop("_compile_for_args", None)
                return original(*args, **kws)  # loads (or compiles) the machine code, numba's way
            if qualname is not None:
                self.calls += 1
            return python

        return compile_for_args

    def add(self, qualname: str, dispatcher: Dispatcher, *, kernel: bool) -> None:
        """Run ``dispatcher`` as Python when it has no specialisation for a call: a kernel until
        :meth:`compiled` names it, a helper (called from Python only by a kernel's twin, or by a
        caller that would compile it) until every kernel is compiled."""
        python = twin(dispatcher)
        if kernel:
            self._kernels[qualname] = dispatcher
            dispatcher._compile_for_args = self._answer(qualname, dispatcher, _quiet(python))
        else:
            dispatcher._compile_for_args = self._answer(None, dispatcher, python)

    def compiled(self, qualname: str) -> None:
        """Kernel ``qualname`` is in numba's cache: its next call loads it."""
        self._ready.add(qualname)
        if not self.waiting:
            self._done = True

    def all_compiled(self) -> None:
        """Every kernel is in numba's cache (or compiles at its next call, as without a tier)."""
        self._ready.update(self._kernels)
        self._done = True

    @property
    def waiting(self) -> list[str]:
        """The kernels still run as Python at their next call."""
        return [q for q in self._kernels if q not in self._ready]


def interpret(kernels: Iterable[str], packages: Iterable[str]) -> Interpreting:
    """Run the kernels named (``"package.module.function"``, as :func:`~.precompile.jobs` names
    them) as Python from now on, until the returned :class:`Interpreting` says each is compiled;
    the helpers of ``packages`` (their compiled functions that are no registered kernel) run as
    Python when they have no specialisation, until every kernel named is compiled. The other
    registered kernels (in the cache already) load as usual; kernels compiled in this process stay
    compiled for the argument types they were compiled for."""
    kernels = set(kernels)
    found = dispatchers(packages)  # (imports every module: each registers its kernels)
    registered = {id(d) for package in packages
                  for d in getattr(importlib.import_module(package), "KERNELS", {}).values()}
    tier = Interpreting()
    with _LOCK:
        _TIERS.append(tier)
        for qualname, dispatcher in found.items():
            if qualname in kernels:
                tier.add(qualname, dispatcher, kernel=True)
            elif id(dispatcher) not in registered and "_compile_for_args" not in dispatcher.__dict__:
                tier.add(qualname, dispatcher, kernel=False)  # (a kernel in the cache: loaded when called)
    return tier


def waiting_kernels() -> int:
    """How many kernels this process runs as Python at their next call (a first run compiling them
    in the background; 0 once every one is compiled, and where nothing was ever interpreted)."""
    return sum(len(tier.waiting) for tier in _TIERS)
