"""Compiling the kernels before a first run: several processes, each filling numba's on-disk cache.

numba compiles a kernel the first time it is called and keeps the machine code in its cache (beside
the sources, or under ``NUMBA_CACHE_DIR``), one index file per kernel; a later process loads it from
there. A cold start would compile them one after another, in the order the first epoch calls them.
:func:`ensure_compiled` instead compiles every kernel missing from the cache ahead of the first
epoch, in a pool of processes (numba's cache is per kernel, so processes compiling different kernels
never write the same file), reporting how far it is; the process that called it then loads them all.

Each kernel is compiled for the argument types the engine calls it with, listed in :data:`SIGNATURES`
(``python -m ddflow.operators.kernels.warm --signatures`` prints them from the warm-up workload; a
test holds the two equal). Kernels are listed longest compilation first, so that a pool finishes
soon after the longest one. Threads are no substitute: numba compiles under one lock, and a thread
compiling while the main thread imports modules can deadlock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .interpreted import Interpreting

# "module.kernel" -> the argument types of each specialisation: a scalar type by its numba name, an
# array as dtype[<ndim><layout>] with an "r" when read-only. Longest compilation first.
SIGNATURES: dict[str, tuple[str, ...]] = {
    'merge.cascade': ('int64[2C], int64, int64, int64[2Cr], int64, int64[1C], int64',),
    'consolidate.consolidate_wide': ('int64[2C], int64[2C], int64[1C], int64[1C]',),
    'consolidate.consolidate_kernel': ('int64[2C], int64[2C], int64[1C], uint64[1C], int64[1C]',),
    'lookup.lookup': ('int64[1C], int64[2C], int64',),
    'points.reduce_points': ('int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1C], int64[2C], int64[1C], int64, int64',),
    'step.reduce_traced_step': ('int64[1C], int64[1C], int64[1C], int64[2C], int64[2C], int64[1C], int64, int64',),
    'step.reduce_step': ('int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1C], int64, int64',),
    'sorting.sort_kernel': ('uint64[1C], int64[1C], uint64[1C], int64[1C], int64, int64', 'uint64[1C], none, uint64[1C], none, int64, int64'),
    'join.join_sorted': ('int64[1C], int64[1C], int64[2C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64',),
    'join.join_traced': ('int64[1C], int64[1C], int64[2C], int64[1C], int64[2C], bool',),
    'trie.build_small': ('int64[1C], int64[1C], int64[2C], int64[1C], int64[1C]',),
    'trie.build_complete': ('int64[1C], int64[1C], int64[2C], int64[1C], int64[2Cr], int64[1C], int64[1C], int64[1C]',),
    'merge.work': ('int64[1C], int64[2Cr], int64',),
    'trie.build': ('int64[1C], int64[1C], int64[2C], int64[1C]',),
    'lookup.flatten': ('int64[2C], int64',),
    'trie.build_into': ('int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64, int64',),
    'hashtable.insert_tagged': ('int32[1C], int8[1C], int64[1C], int64[1C], int64, int64[1C], int64, int64, int64',),
    'hashtable.insert_tagged_into': ('int32[1C], int8[1C], int64[1C], int64[1C], int64, int64[1C], int64, int64, int64',),
    'hashtable.insert': ('int32[1C], int64[1C], int64[1C], int64, int64[1C], int64, int64, int64',),
    'lookup.expand': ('int64[1C], int64, int64, int64, int64, int64, int64',),
    'merge.begin': ('int64[1C], int64, int64, int64, int64, int64, int64, int64, int64, int64',),
    'diffs.reduce_emit': ('int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1C]',),
    'rounds.pair_hashes': ('int64, int64[1C], int64',),
    'rounds.pair_hashes_into': ('int64, int64[1C], int64',),
    'columns.int_columns': ('int64[1C], int8[1C], int64[1C], int64, int64, int64',),
    'columns.key_owners': ('int64[1C], int8[1C], int64[1C], int64[1C], int64[1C], int64',),
    'columns.covers_range': ('int64[1C], int64, int64',),
    'columns.fill_range': ('int64[1C], int64',),
    'address.address': ('int64[1C]',),
    'reclaim.mark': ('int64[1C], bool[1C], int8[1C], bool[1C], int64[1C]',),
    'hashtable.build': ('int64[1C], int8[1C], bool[1C], int64, int64, int64, int64',),
    'hashtable.find_tagged': ('int32[1C], int8[1C], int64[1C], int64[1C]',),
    'hashtable.find': ('int32[1C], int64[1C], int64[1C]',),
    'rounds.add_counts': ('int64[1C], int64[1C], int8[1C], int64[1C]',),
    'reclaim.sweep': ('int8[1C], bool[1C], int64, int64, bool[1C]',),
    'rounds.claim': ('int64[1C], int64[1C], int32[1C], int8[1C]',),
    'frontier.beyond': ('int64[2C], int64[2Cr]',),
    'frontier.least_ready': ('int64[2C], int64[2Cr]',),
    'trie.count': ('int64[1C], int64[1C]',),
    'history.history_gather': ('int64[1C], int64[1C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1Cr], int64[1Cr], int64[2Cr], int64[1Cr]',),
    'history.history_store': ('int64[1C], int64[1C], int64[1C], int64[1C], int64[2C], int64[1C], int64[1C], int64[1C], int64[1C], int64, int64[1C], int64[2C], int64[1C], int64',),
}

_ARRAY = re.compile(r"(\w+)\[(\d)([CAF])(r?)\]$")


def encode(signature: tuple) -> str:
    """The text of a signature (a tuple of numba types): ``"int64[1C], int64[2Cr], int64"``."""
    from numba.core import types

    parts = []
    for t in signature:
        if isinstance(t, types.Array):
            parts.append(f"{t.dtype}[{t.ndim}{t.layout}{'' if t.mutable else 'r'}]")
        else:
            parts.append(str(t))
    return ", ".join(parts)


def decode(text: str) -> tuple:
    """The numba types of a signature's text (:func:`encode`'s inverse)."""
    from numba.core import types

    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _ARRAY.match(part)
        if m:
            dtype, ndim, layout, readonly = m.groups()
            out.append(types.Array(getattr(types, dtype), int(ndim), layout, readonly=bool(readonly)))
        else:
            out.append(getattr(types, part))
    return tuple(out)


ENGINE = "ddflow.operators.kernels"  # the package whose kernels SIGNATURES lists

# how much lower the priority of a first run's compiler processes is than the process that runs the
# kernels as Python meanwhile (os.nice): on two cores its first results came in 4.2 s at 10, 8.5 s at 0
COMPILER_NICENESS = 10

Jobs = dict[str, tuple[str, ...]]  # "package.module.function" -> its signatures


def jobs(package: str = ENGINE, signatures: dict[str, tuple[str, ...]] | None = None) -> Jobs:
    """The compile jobs of a package's kernels, listed as ``{"module.function": signatures}``
    (default: the engine's, :data:`SIGNATURES`); ``module`` is a module's last name, found in the
    package or in its subpackages (``points.reduce_points`` is ``<package>.reduce.points``)."""
    modules = _modules(package)
    out = {}
    for name, sigs in (SIGNATURES if signatures is None else signatures).items():
        module, function = name.rsplit(".", 1)
        out[f"{modules.get(module, f'{package}.{module}')}.{function}"] = sigs
    return out


def _modules(package: str) -> dict[str, str]:
    """Every module of ``package`` and of its subpackages, by last name (imports the subpackages,
    which compiles nothing)."""
    import importlib
    import pkgutil

    path = importlib.import_module(package).__path__
    return {info.name.rsplit(".", 1)[-1]: info.name
            for info in pkgutil.walk_packages(path, f"{package}.") if not info.ispkg}


def _dispatcher(qualname: str):
    import importlib

    module, function = qualname.rsplit(".", 1)
    return getattr(importlib.import_module(module), function)


def missing(todo: Jobs | None = None) -> list[str]:
    """The kernels of ``todo`` (default: the engine's) whose cache lacks some of their signatures, in
    their order. Reads the cache's index files only (milliseconds; compiles nothing). A kernel
    that does not exist (any more) is left out: whatever calls it compiles it."""
    todo = jobs() if todo is None else todo
    out = []
    for qualname, signatures in todo.items():
        try:
            dispatcher = _dispatcher(qualname)
        except (ImportError, AttributeError):  # a kernel the list names no more: compiled when called
            continue
        try:
            index = dispatcher._cache._cache_file._load_index()  # {} when absent or stale
        except Exception:  # an unreadable index: compile
            index = {}
        have = {encode(key[0]) for key in index}
        if not set(signatures) <= have:
            out.append(qualname)
    return out


def compile_here(qualname: str, signatures: tuple[str, ...]) -> tuple[str, float]:
    """Compile kernel ``qualname`` for each of ``signatures`` in this process (writing numba's
    cache); returns ``(qualname, seconds)``."""
    start = time.perf_counter()
    dispatcher = _dispatcher(qualname)
    for text in signatures:
        dispatcher.compile(decode(text))
    return qualname, time.perf_counter() - start


Progress = Callable[[int, int, str], None]  # (kernels done, kernels to compile, the last one done)


def ensure_compiled(todo: Jobs | None = None, *, processes: int | None = None,
                    progress: Progress | None = None) -> int:
    """Compile every kernel of ``todo`` (default: the engine's, see :func:`jobs`) missing from numba's
    cache, in ``processes`` processes (default: the CPUs this process may use, at most one per
    kernel), calling ``progress`` after each with its short name (``merge.cascade``); returns how many
    were compiled (0 on a warm cache, at the cost of reading the index files). The kernels are then
    loaded from the cache by whoever calls them. A process that finds another one compiling into the
    same cache waits for it and compiles only what it left (usually nothing)."""
    todo = jobs() if todo is None else todo
    if not missing(todo):
        return 0
    return _fill(todo, processes, progress)


def _fill(todo: Jobs, processes: int | None, progress: Progress | None, *,
          compiled: Callable[[str], None] | None = None, stop=None) -> int:
    """Compile what of ``todo`` the cache lacks once this process holds the cache's lock (processes
    started together on a cold cache, workers or CI, compile once: the others wait, then find it
    done), telling ``compiled`` of each kernel then in the cache; see :func:`_compile`."""
    with _one_compiler():
        names = missing(todo)  # what a process that held the lock before left to do
        if compiled is not None:
            for name in todo:
                if name not in names:
                    compiled(name)
        return _compile(todo, names, processes, progress, compiled=compiled, stop=stop) if names else 0


@contextlib.contextmanager
def _one_compiler():
    """An exclusive lock per numba cache location, held while a process fills the cache: a second
    process (daemon workers, test runs started together on a cold cache) waits for it, then finds the
    kernels compiled instead of compiling them again."""
    import fcntl
    import hashlib
    import tempfile

    from numba.core import config

    where = os.path.abspath(config.CACHE_DIR or os.path.dirname(__file__))
    name = f"ddflow-compile-{hashlib.sha1(where.encode()).hexdigest()[:16]}.lock"
    with open(os.path.join(tempfile.gettempdir(), name), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def compile_while_interpreting(todo: Jobs, packages: tuple[str, ...], *,
                               progress: Progress | None = None) -> Interpreting | None:
    """Compile the kernels of ``todo`` missing from numba's cache in processes of a lower priority
    (one per CPU), from a thread of this process, and return at once: until each is in the cache,
    this process runs it as Python (:mod:`~.interpreted`; ``packages`` hold the kernels and their
    helpers), then loads it at its next call. None when nothing is missing (a warm start, milliseconds).
    ``progress`` is called from that thread. The compilation stops with the process: its jobs not
    begun are dropped and its processes ended (numba writes each cache file whole, or not at all)."""
    import threading

    from .interpreted import interpret

    names = missing(todo)
    if not names:
        return None
    tier = interpret(names, packages)
    stop = threading.Event()

    def fill() -> None:
        try:
            _fill(todo, None, progress, compiled=tier.compiled, stop=stop)
        except Exception:  # (a compiler process that died, a full disk): the kernels compile as without a tier
            if not stop.is_set():
                logging.getLogger("ddflow").warning(
                    "compiling the kernels in the background failed; each missing kernel compiles at its next "
                    "call instead", exc_info=True)
        finally:
            tier.all_compiled()  # what is not in the cache now compiles at its next call, as without a tier

    _at_shutdown(stop.set)
    threading.Thread(target=fill, name="ddflow-compile", daemon=True).start()
    return tier


def _at_shutdown(callback: Callable[[], None]) -> None:
    """Call ``callback`` when the interpreter shuts down, before it waits for the pools of processes
    (which would otherwise finish every job they were given)."""
    import threading

    register = getattr(threading, "_register_atexit", None)  # runs before concurrent.futures' own wait
    if register is not None:
        register(callback)
    else:  # pragma: no cover - other Pythons
        import atexit

        atexit.register(callback)


def _in_background() -> None:
    """A compiler process of a first run: :data:`COMPILER_NICENESS` lower priority, and ended with its
    parent (on Linux: a daemon killed by SIGKILL leaves no compiler behind)."""
    os.nice(COMPILER_NICENESS)
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # the parent died before the call
            os._exit(0)


def _compile(todo: Jobs, names: list[str], processes: int | None, progress: Progress | None, *,
             compiled: Callable[[str], None] | None = None, stop=None) -> int:
    """Compile ``names`` in ``processes`` processes (default: one per CPU, at most one per kernel),
    telling ``progress`` and ``compiled`` (the qualname) after each. With ``stop`` (an event) the
    compilation is a background one: its processes run at a lower priority and end with this one,
    and ``stop`` set (by whoever, or at shutdown) drops the jobs not begun and ends them."""
    if stop is not None and stop.is_set():
        return 0
    from concurrent.futures import ProcessPoolExecutor, as_completed  # a cold cache's only: a warm start
    from multiprocessing import get_context  # imports neither (~10-20 ms)

    if processes is None:
        processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = max(1, min(processes, len(names)))
    total = len(names)
    if progress is not None:
        progress(0, total, "")
    if processes == 1 and stop is None:
        for done, name in enumerate(names, 1):
            compile_here(name, todo[name])
            if compiled is not None:
                compiled(name)
            if progress is not None:
                progress(done, total, _short(name))
        return total
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"),
                               initializer=None if stop is None else _in_background)
    if stop is not None:
        def end() -> None:
            stop.set()
            processes = list((pool._processes or {}).values())  # (shutdown forgets them)
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()

        _at_shutdown(end)
    with pool:
        futures = [pool.submit(compile_here, name, todo[name]) for name in names]
        for done, future in enumerate(as_completed(futures), 1):
            if stop is not None and stop.is_set():
                return done - 1
            name, _seconds = future.result()
            if compiled is not None:
                compiled(name)
            if progress is not None:
                progress(done, total, _short(name))
    return total


def _short(qualname: str) -> str:
    return ".".join(qualname.rsplit(".", 2)[-2:])


def stderr_progress(prefix: str = "compiling kernels (first run)") -> Progress:
    """A ``progress`` that writes ``compiling kernels (first run): 7/27 merge.cascade`` lines to stderr."""
    import sys

    started = time.perf_counter()

    def report(done: int, total: int, name: str) -> None:
        if done == 0:
            print(f"{prefix}: 0/{total} (once per kernel cache; later starts load them)", file=sys.stderr,
                  flush=True)
        else:
            print(f"{prefix}: {done}/{total} {name} ({time.perf_counter() - started:.1f} s)", file=sys.stderr,
                  flush=True)

    return report
