"""Compiling kernels ahead of a first run, in processes: the signature list, and a cold cache filled."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddflow.operators.kernels import precompile


@pytest.mark.compiles
def test_signatures_are_those_the_warm_up_workload_calls():
    """The list the processes compile from is the workload's, kernel for kernel (regenerate it with
    ``python -m ddflow.operators.kernels.warm --signatures`` when a kernel or its types change)."""
    out = subprocess.run([sys.executable, "-m", "ddflow.operators.kernels.warm", "--signatures"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    printed = ast.literal_eval(out.split("=", 1)[1].strip())
    assert printed == precompile.SIGNATURES, "regenerate precompile.SIGNATURES: python -m ddflow.operators.kernels.warm --signatures"


def test_every_listed_kernel_is_found_where_the_processes_import_it():
    """Kernels of subpackages included (``points.reduce_points`` lives in ``kernels.reduce.points``):
    one not found would be left out of the parallel compile silently, and compiled by the first epoch."""
    from ddflow.daemon.formats.kernels.warm import SIGNATURES as CODEC

    todo = {**precompile.jobs(), **precompile.jobs("ddflow.daemon.formats.kernels", CODEC)}
    assert len(todo) == len(precompile.SIGNATURES) + len(CODEC)
    for qualname in todo:
        assert hasattr(precompile._dispatcher(qualname), "signatures"), qualname


def test_a_kernel_listed_but_gone_is_left_to_compile_when_called():
    todo = {"ddflow.operators.kernels.nowhere.kernel": ("int64",), "ddflow.operators.kernels.merge.nothing": ("int64",)}
    assert precompile.missing(todo) == [] and precompile.ensure_compiled(todo) == 0


@pytest.mark.compiles
def test_a_warm_cache_is_checked_without_the_process_pool_imports():
    """A warm start pays for reading the index files only, not for importing the process pool."""
    code = ("import sys; from ddflow.daemon.cli.commands import compile_kernels; "
            "print(compile_kernels(), 'multiprocessing' in sys.modules, 'concurrent.futures.process' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False", "False"]


def test_a_signature_reads_back_as_the_same_numba_types():
    from numba.core import types

    for sigs in precompile.SIGNATURES.values():
        for text in sigs:
            assert precompile.encode(precompile.decode(text)) == text
    assert precompile.decode("int64[2Cr], none, bool") == (
        types.Array(types.int64, 2, "C", readonly=True), types.none, types.boolean)


@pytest.mark.slow  # compiles two kernels cold in fresh processes (the full suite runs it)
def test_a_cold_cache_is_filled_by_processes_and_then_loaded(tmp_path: Path):
    names = ["frontier.beyond", "trie.count"]
    code = ("import sys; from ddflow.operators.kernels import precompile as p; "
            f"todo = {{k: v for k, v in p.jobs().items() if k.split('.', 3)[3] in {names!r}}}; "
            "print('missing', [n.split('.', 3)[3] for n in p.missing(todo)]); "
            "print('compiled', p.ensure_compiled(todo, processes=2, progress=p.stderr_progress())); "
            "print('then missing', p.missing(todo))")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"missing {names}", "compiled 2", "then missing []"]
    lines = run.stderr.splitlines()
    assert lines[0] == "compiling kernels (first run): 0/2 (once per kernel cache; later starts load them)"
    assert [line.split()[4] for line in lines[1:]] == ["1/2", "2/2"]
    assert {line.split()[5] for line in lines[1:]} == set(names)
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert again.stdout.splitlines() == ["missing []", "compiled 0", "then missing []"] and again.stderr == ""


@pytest.mark.slow  # compiles a kernel cold in fresh processes (the full suite runs it)
def test_processes_started_together_on_a_cold_cache_compile_once(tmp_path: Path):
    code = ("from ddflow.operators.kernels import precompile as p; "
            "todo = {k: v for k, v in p.jobs().items() if k.endswith('.address.address')}; "
            "print(p.ensure_compiled(todo, processes=1))")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    counts = sorted(int(r.communicate(timeout=600)[0]) for r in runs)
    assert counts == [0, 1]  # one compiled it, the other waited and loaded it


def test_the_codec_kernels_are_listed_as_the_daemon_calls_them():
    code = ("from ddflow.daemon.formats.kernels import KERNELS, warm; from ddflow.operators.kernels import precompile; "
            "warm.edge_cases(); "
            "print({n: tuple(sorted(precompile.encode(s) for s in k.signatures)) for n, k in KERNELS.items()})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600).stdout
    from ddflow.daemon.formats.kernels.warm import SIGNATURES

    assert ast.literal_eval(out) == SIGNATURES
