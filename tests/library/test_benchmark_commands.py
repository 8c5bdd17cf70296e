"""The benchmark commands of docs/performance.md's library section name real scripts and parse."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

from support.docs import example, section

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = ("bench_reachability", "bench_reachability_1m", "bench_intern", "bench_cc_window")


def subsection() -> str:
    return example("library-benchmarks", "bash")


def load(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # bench_reachability_1m imports bench_reachability
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def commands() -> list[list[str]]:
    assert subsection() in section("performance.md", "Dataflow library: the seeds' benchmarks")
    return [shlex.split(line) for line in subsection().splitlines() if line.strip()]


def test_the_section_lists_every_benchmark():
    named = {Path(cmd[1]).stem for cmd in commands()}
    assert named == set(SCRIPTS)


@pytest.mark.parametrize("argv", commands(), ids=lambda argv: " ".join(argv[1:]))
def test_command_parses(argv):
    assert argv[0] == ".venv/bin/python"
    script = ROOT / argv[1]
    assert script.parent == BENCHMARKS and script.exists(), argv[1]
    load(script.stem).arguments().parse_args(argv[2:])


@pytest.mark.parametrize("name", SCRIPTS)
def test_bad_option_is_refused(name, capsys):
    with pytest.raises(SystemExit):
        load(name).arguments().parse_args(["--no-such-option"])
    assert "--no-such-option" in capsys.readouterr().err


def test_intern_benchmark_checks_the_library_ids_on_a_small_run(capsys):
    """The interning benchmark's numpy baseline computes the library's ids (the stable key hash of
    ``(round, record)``), so a small run passes its own check."""
    assert load("bench_intern").main(["--records", "3000"]) == 0
    assert "checked: 3,000 unique ids, equal to the baseline's" in capsys.readouterr().out


def test_kernel_loops_benchmark_runs_its_checks(capsys):
    """The kernels' benchmark takes its inputs from running dataflows and checks the counts and the
    hash table's values; a run with few repeats passes those checks and prints the three kernels."""
    assert load("bench_kernel_loops").main(["--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count(" (x") == 3 and "reduce_points" in out and "insert_tagged" in out and "cascade" in out


def test_merge_benchmark_checks_the_idle_merge_on_a_small_run(capsys):
    """The merge benchmark checks the trace's accumulations after its idle merge; pair by pair the
    round batches become one, a cascade within the same fuel leaves several."""
    assert load("bench_merge").main(["--updates", "20000", "--keys", "5000", "--rounds", "11", "--peak", "40000",
                                     "--cascade"]) == 0
    out = capsys.readouterr().out
    assert out.count("merge kernel") == 2
    assert "pair by pair" in out and ", 1 batch left" in out and "one cascade" in out


def test_the_16_core_worker_commands_parse():
    """The worker benchmarks' commands of the 16-core section name real scripts and parse."""
    block = example("workers-16-core", "bash")
    assert block in section("performance.md", "Workers on a 16-core machine")
    argvs = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert {Path(a[1]).stem for a in argvs} == {"bench_workers", "bench_workers_mesh"}
    for argv in argvs:
        assert argv[0] == ".venv/bin/python" and (ROOT / argv[1]).exists(), argv
        load(Path(argv[1]).stem).arguments().parse_args(argv[2:])


def test_sustained_latency_with_repeated_changes_meets_the_same_windows(capsys):
    """``--repeat``: the last window's changes are the first window's again, so a change travels as
    many loop rounds in both (the windows' graphs are the same; only the engine's age differs)."""
    bench = load("bench_reachability")
    e = bench.workload(50, 100, 1_000)
    again = bench.repeated(e, 700)
    assert (again[:700] == e[:700]).all() and (again[700:] == e[: len(e) - 700]).all()
    assert bench.main(["--nodes", "60", "--edges", "120", "--roots", "3", "--sustained", "900", "--window", "150",
                       "--repeat", "--baseline-seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "changes 750..899 meet the same windows as changes 0..149" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["150"], ["900"])}
    assert rows["150"][-3] == rows["900"][-3]  # loop rounds per epoch: the same windows, the same rounds
