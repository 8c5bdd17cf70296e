"""Kernels run as Python while they compile (``ddflow.operators.kernels.interpreted``): the same
results as the machine code, bit for bit, and each kernel back on its machine code once compiled.

Three holds: the kernels' own property tests run with every kernel as its Python twin (``pytest
--kernels python``: the references are the oracle); a dataflow of every operator, fed random updates
with retractions and negative multiplicities at many times per epoch, gives the same updates when
its kernels start as Python and turn compiled midway as when they are compiled throughout (in a
fresh process: this one has loaded them); and a cold ``ddflow run`` answers before its kernels are
compiled (tests/daemon/test_cold_start.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddflow.operators import Dataflow
from ddflow.operators.kernels import warm

ROOT = Path(__file__).resolve().parents[2]


def random_run(seed: int, epochs: int, *, switch_after: int | None = None, tier=None) -> str:
    """The updates of a dataflow of every built-in operator over ``epochs`` random epochs (the pairs
    with negative multiplicities, the graph's edges inserted and removed), as one JSON text; after epoch ``switch_after`` ``tier`` is told every kernel is compiled."""
    rng = np.random.default_rng(seed)
    df = Dataflow()
    edges, roots, pairs = df.new_input("edges"), df.new_input("roots"), df.new_input("pairs")
    probes = warm.every_operator(edges.collection, roots.collection, pairs.collection)
    roots.insert(0, 0)
    roots.insert(3, 0)
    time, live = 1, []
    for epoch in range(epochs):
        for _ in range(int(rng.integers(1, 6))):  # several distinct times an epoch
            for _ in range(int(rng.integers(1, 8))):
                edge = (int(rng.integers(0, 12)), int(rng.integers(0, 12)))
                pair = (int(rng.integers(-3, 6)), int(rng.integers(-2**62, 2**62)) if rng.random() < 0.1
                        else int(rng.integers(0, 9)))
                if live and rng.random() < 0.3:  # the loops' inputs keep counts of at least zero
                    edges.remove(live.pop(int(rng.integers(0, len(live)))), time)
                else:
                    live.append(edge)
                    edges.insert(edge, time)
                pairs.update(pair, time, int(rng.choice([1, 1, 3, -1, -2])))
            time += int(rng.integers(1, 4))
        for session in (edges, roots, pairs):
            session.advance_to(time)
        df.run()
        if switch_after is not None and epoch + 1 == switch_after:
            tier.all_compiled()
    return json.dumps([sorted(map(repr, p.updates)) for p in probes])


@pytest.mark.slow
def test_the_kernels_property_tests_pass_with_every_kernel_as_python():
    """The kernels' suite, each kernel a Python twin held to its reference (5 examples a property;
    the compiling tests are skipped: they are about the machine code)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--kernels", "python",
         "tests/kernels", "--deselect", "tests/kernels/test_interpreted.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "HYPOTHESIS_PROFILE": "quick"})
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


@pytest.mark.parametrize("seed", [1, 2])
def test_a_run_whose_kernels_turn_compiled_midway_gives_the_compiled_results(seed: int):
    expected = random_run(seed, 12)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_interpreted as t; "
            "from ddflow.daemon.cli.commands import KERNEL_PACKAGES, kernel_jobs; "
            "from ddflow.operators.kernels.interpreted import interpret; "
            "tier = interpret(kernel_jobs(), KERNEL_PACKAGES); "
            "print(t.random_run(int(sys.argv[2]), 12, switch_after=6, tier=tier)); "
            "print(tier.calls, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(seed)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert int(out.stderr.split()[-1]) > 100  # kernels did run as Python before the switch
    assert out.stdout.strip() == expected


def test_a_kernel_runs_as_python_until_compiled_then_as_machine_code():
    code = """
from ddflow.daemon.cli.commands import KERNEL_PACKAGES
from ddflow.operators.kernels import consolidate, interpreted
import numpy as np
tier = interpreted.interpret(["ddflow.operators.kernels.consolidate.consolidate_kernel"], KERNEL_PACKAGES)
args = (np.array([3, 1, 3]),), np.zeros((3, 1), dtype=np.int64), np.array([1, 2, 5])
first = consolidate.consolidate(*args)
assert tier.calls == 1 and not consolidate.consolidate_kernel.signatures, tier.calls
assert tier.waiting == ["ddflow.operators.kernels.consolidate.consolidate_kernel"]
tier.compiled("ddflow.operators.kernels.consolidate.consolidate_kernel")
second = consolidate.consolidate(*args)
third = consolidate.consolidate(*args)
assert tier.calls == 1 and consolidate.consolidate_kernel.signatures and tier.waiting == []
for a, b in zip(first, second):
    for x, y in zip(a if isinstance(a, tuple) else [a], b if isinstance(b, tuple) else [b]):
        assert np.array_equal(x, y)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-4000:]


def test_hashes_of_int64_extremes_are_the_same_as_python():
    """Where Python's ints would not wrap, the twins' numpy scalars must: the owners of keys and the
    tables' hashes of extreme ints agree with the machine code's."""
    from ddflow.operators.kernels import columns, hashtable, rounds
    from ddflow.operators.kernels.interpreted import twin

    extremes = np.array([0, 1, -1, -2, 2**63 - 1, -2**63, -2**63 + 1, 2**62, 12345678901234567], dtype=np.int64)
    for modulus in (0, 7, 2**61 - 1):
        with np.errstate(over="ignore"):
            as_python = twin(rounds.pair_hashes)(3, extremes.copy(), modulus)
        assert np.array_equal(as_python, rounds.pair_hashes(3, extremes.copy(), modulus))
    with np.errstate(over="ignore"):
        for key in extremes:
            for capacity in (64, 2**31):
                assert twin(hashtable.home)(key, capacity) == hashtable.home(key, capacity)
            assert twin(hashtable.tag)(key) == hashtable.tag(key)
    ids = np.arange(len(extremes), dtype=np.int64)
    kinds, ints, no_pairs = np.zeros(len(extremes), dtype=np.int8), np.zeros(1, dtype=np.int64), np.zeros(0, np.int64)
    for workers in (2, 3, 7):
        with np.errstate(over="ignore"):
            as_python = twin(columns.key_owners)(ids, kinds, extremes, ints, no_pairs, workers)
        compiled = columns.key_owners(ids, kinds, extremes, ints, no_pairs, workers)
        assert np.array_equal(as_python[0], compiled[0]) and as_python[1] == compiled[1] == 0


def test_a_compilation_that_fails_in_the_background_is_logged_and_the_kernel_compiles_when_called(tmp_path: Path):
    code = """
import logging, time
import numpy as np
logging.basicConfig(level=logging.WARNING)
from ddflow.operators.kernels import columns, interpreted, precompile
todo = {"ddflow.operators.kernels.columns.fill_range": ("no_such_type[1C], int64",)}  # fails in the compiler
tier = precompile.compile_while_interpreting(todo, ("ddflow.operators.kernels",))
out = np.zeros(3, dtype=np.int64)
columns.fill_range(out, 5)  # as Python meanwhile
deadline = time.monotonic() + 120
while tier.waiting and time.monotonic() < deadline:
    time.sleep(0.05)
again = np.zeros(3, dtype=np.int64)
columns.fill_range(again, 7)  # compiled here, as without a tier
print(out.tolist(), again.tolist(), tier.calls, len(columns.fill_range.signatures), interpreted.waiting_kernels())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.split("]")[:2] == ["[5, 6, 7", " [7, 8, 9"]
    assert out.stdout.split()[-3:] == ["1", "1", "0"], out.stdout
    assert "compiling the kernels in the background failed" in out.stderr and "no_such_type" in out.stderr


def test_a_kernel_in_the_cache_loads_and_the_helpers_compile_once_every_kernel_is():
    """A partly warm cache: only the kernels named run as Python; another kernel loads its machine
    code at its first call, and a helper called from Python compiles once the tier is done."""
    code = """
import numpy as np
from ddflow.daemon.cli.commands import KERNEL_PACKAGES
from ddflow.operators.kernels import columns, consolidate, interpreted
tier = interpreted.interpret(["ddflow.operators.kernels.consolidate.consolidate_kernel"], KERNEL_PACKAGES)
assert columns.covers_range(np.array([4, 3, 5], dtype=np.int64), 3, 3)  # in the cache: loaded
assert columns.covers_range.signatures and tier.calls == 0
consolidate.consolidate((np.array([3, 1, 3]),), np.zeros((3, 1), dtype=np.int64), np.array([1, 2, 5]))
assert tier.calls == 1
x = np.uint64(5)
assert consolidate.bit_length(x) == 3 and not consolidate.bit_length.signatures  # a helper: Python
tier.compiled("ddflow.operators.kernels.consolidate.consolidate_kernel")
assert consolidate.bit_length(x) == 3 and consolidate.bit_length.signatures  # compiled as usual
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-4000:]
