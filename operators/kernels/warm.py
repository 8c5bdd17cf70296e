"""Compile every kernel ahead of time: ``python -m ddflow.operators.kernels.warm``.

The kernels missing from the cache are compiled first, in parallel processes
(:mod:`~ddflow.operators.kernels.precompile`); then a small dataflow runs that uses every operator
(linear, join, reduce with each built-in logic, nested iterate) plus the trace maintenance under
it, so that each kernel is compiled (or loaded) for the types the engine calls it with and written
to numba's on-disk cache (``NUMBA_CACHE_DIR`` when set). A process started afterwards with the same
cache loads the kernels instead of compiling them. Exits 1 naming any kernel the workload did not
compile, so a kernel added without coverage here is noticed.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

from .. import kernels


def import_all() -> None:
    """Import every kernel module (each registers its kernels in ``KERNELS``)."""
    for info in pkgutil.iter_modules(kernels.__path__):
        if info.name not in ("warm", "precompile"):
            importlib.import_module(f"{kernels.__name__}.{info.name}")


def workload() -> None:
    """A small dataflow touching every operator, run over a few epochs with retractions."""
    from ..tuning import EngineConfig
    from ..dataflow import Dataflow

    for executor in ("plan", "nodes"):  # (the reference executor's steps call some kernels the plan's do not)
        _every_operator(EngineConfig(sweep_growth=1, sweep_min_ids=1, reduce_history_keys=1, executor=executor))
    # with the default tuning a round of a few keys keeps no history: a distinct reads its traces in
    # the round's kernel
    plain = Dataflow()
    items = plain.new_input("items")
    distinct = items.collection.distinct().capture()
    for t in range(1, 4):
        items.insert(t % 2, t)
        items.advance_to(t + 1)
        plain.run()
    assert distinct.at(3) == {0: 1, 1: 1}
    traces()
    from ..values.interner import Interner

    interner = Interner()  # the owners of keys an exchange between workers routes
    interner.owners(interner.ids([1, (2, 3), "a"]), 2)


def every_operator(edges, roots, pairs) -> list:
    """A capture of each built-in operator (and the library's dataflows) over the collections
    ``edges`` and ``pairs`` of ``(int, int)`` records and ``roots`` of ints: what a workload must
    reach to call every kernel. ``pairs`` may hold negative multiplicities (no loop reads it but
    through a ``distinct``); ``edges`` not (the graph loops read it)."""
    from ..library import connected_components, intern, reachability

    return [
        reachability(roots, edges).capture(),
        connected_components(edges).capture(),
        pairs.count().capture(),
        pairs.min().capture(),
        pairs.max().capture(),
        pairs.sum().capture(),
        pairs.top_k(2).capture(),
        pairs.distinct().capture(),
        pairs.threshold(lambda record, m: 1 if m > 1 else 0).capture(),
        pairs.join(edges).capture(),
        pairs.semijoin(roots).capture(),
        pairs.antijoin(roots).capture(),
        pairs.reduce(lambda k, vs: [(len(vs), 1)]).capture(),
        intern(pairs).capture(),
        pairs.distinct().map(lambda p: p[0] * 7 - p[1]).iterate(lambda c: c.map(lambda x: x // 2).concat(c).distinct())
        .capture(),
    ]


def _every_operator(config) -> None:
    """Every operator over a few epochs with retractions, in a dataflow of ``config`` (ids reclaimed
    after every run; reductions keep histories from rounds of one key on: their kernels)."""
    from ..dataflow import Dataflow
    from ..library import StableHashModulo, intern

    df = Dataflow(config=config)
    edges, roots, pairs = df.new_input("edges"), df.new_input("roots"), df.new_input("pairs")
    probes = every_operator(edges.collection, roots.collection, pairs.collection)
    probes.append(intern(pairs.collection, hasher=StableHashModulo(64)).capture())
    roots.insert(0, 0)
    roots.insert(1.0, 0)  # a float equal to an int: looked up in the ints' table
    for t in range(1, 40):
        edges.insert((t % 7, (t * 3) % 11), t)
        pairs.insert((t % 5, t), t)
        if t > 10:
            edges.remove(((t - 10) % 7, ((t - 10) * 3) % 11), t)
            pairs.remove(((t - 10) % 5, t - 10), t)
        for session in (edges, roots, pairs):
            session.advance_to(t + 1)
        df.run()
    assert all(p.at(39) is not None for p in probes)


def traces() -> None:
    """Trace work the small dataflow above does not reach: batches large enough for numpy-allocated
    buffers, batches built after a separate consolidation (more than ``trie.SMALL`` updates) and by
    :func:`~ddflow.operators.kernels.trie.build_small`, reading a whole trace, merges spread over
    inserts (a trace given little fuel), and sealing the complete part of a step in one call
    (:func:`~ddflow.operators.kernels.trie.build_complete`)."""
    import numpy as np

    from ..frontier import Antichain
    from ..traces.batch import Updates
    from ..traces.spine import Spine
    from ..tuning import EngineConfig

    trace = Spine(1)
    for t, n in enumerate((1 << 16, 100, 10)):
        keys = np.arange(n, dtype=np.int64)
        trace.insert(Updates((keys, keys), np.full((n, 1), t, dtype=np.int64), np.ones(n, dtype=np.int64)),
                     Antichain([t + 1]))
    trace.lookup(np.arange(5, dtype=np.int64))
    trace.contents()
    fueled = Spine(1, config=EngineConfig(merge_fuel_per_update=1, merge_min_fuel=1))  # merges over several inserts
    for t in range(3):
        keys = np.arange(50, dtype=np.int64)
        fueled.insert(Updates((keys, keys), np.full((50, 1), t, dtype=np.int64), np.ones(50, dtype=np.int64)),
                      Antichain([t + 1]))
    keys = np.arange(4, dtype=np.int64)  # an arrangement's step of the plan executor: sealed in one call
    trace.insert_complete(keys, keys, np.arange(3, 7, dtype=np.int64).reshape(4, 1), np.ones(4, dtype=np.int64),
                          Antichain([5]))


def edge_cases() -> None:
    """Kernels a small dataflow does not reach: the consolidation of rows wider than 64 bits (times
    far apart with large diffs), the radix sort's own entry point, the int columns of drained
    ids and the run of a dense int column. The daemon's msgpack codec kernels have their own: `ddflow.daemon.formats.kernels.warm`."""
    import numpy as np

    from .columns import covers_range, fill_range, int_columns
    from .consolidate import consolidate
    from .sorting import radix_sort

    consolidate([np.array([0, 1, 0])], np.array([[0], [2**62], [0]]), np.array([3, -5, 1]))
    radix_sort(np.array([3, 1, 2], dtype=np.uint64), None)
    # record ids back to int columns (a capture drained as columns): the pair (5, 6) of ids 0 and 1
    int_columns(np.array([2], dtype=np.int64), np.array([0, 0, 1], dtype=np.int8), np.array([5, 6, 1], dtype=np.int64),
                0, 1, 1 << 62)
    radix_sort(np.array([3, 1, 2], dtype=np.uint64), np.arange(3))
    # a dense column of ints taking a run of ids (a run spans thousands of ints)
    covers_range(np.array([4, 3, 5, 3], dtype=np.int64), 3, 3)
    fill_range(np.zeros(3, dtype=np.int64), 3)


def signatures() -> dict[str, tuple[str, ...]]:
    """Every kernel's signatures after the warm-up workload, as :data:`precompile.SIGNATURES` lists
    them (in its order; kernels it does not list yet go last)."""
    from .precompile import SIGNATURES, encode

    import_all()
    workload()
    edge_cases()
    found = {name: tuple(sorted(encode(s) for s in k.signatures)) for name, k in kernels.KERNELS.items()}
    order = [n for n in SIGNATURES if n in found] + sorted(n for n in found if n not in SIGNATURES)
    return {name: found[name] for name in order}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--signatures"]:
        print("SIGNATURES: dict[str, tuple[str, ...]] = {")
        for name, sigs in signatures().items():
            print(f"    {name!r}: ({''.join(repr(s) + ', ' for s in sigs).rstrip(' ')}),")
        print("}")
        return 0
    from .precompile import ensure_compiled, stderr_progress

    start = time.perf_counter()
    compiled = ensure_compiled(progress=stderr_progress("compiling kernels"))
    import_all()
    workload()
    edge_cases()
    elapsed = time.perf_counter() - start
    missing = sorted(name for name, k in kernels.KERNELS.items() if not k.signatures)
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the sources (__pycache__)"
    print(f"{len(kernels.KERNELS) - len(missing)} of {len(kernels.KERNELS)} kernels compiled or loaded "
          f"in {elapsed:.1f} s ({compiled} compiled in parallel processes); cache: {where}")
    if missing:
        print(f"not exercised by the warm-up workload: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
