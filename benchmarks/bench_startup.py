"""Cold and warm start: compiling the engine's kernels, and `ddflow run` from launch to ready.

Cold means an empty numba cache (``NUMBA_CACHE_DIR`` a fresh directory: every kernel is compiled),
warm means the cache the cold run left. Two figures each:

* ``python -m ddflow.operators.kernels.warm``: compile (cold) or load (warm) every kernel and run a
  small dataflow touching every operator;
* ``ddflow run`` on the reachability example against the embedded broker (or ``KAFKA_BOOTSTRAP``),
  from process launch until ``/readyz`` answers 200, i.e. the first epoch of 1,000 edges is
  published. The same-run baseline is the warm figure of each; the printed ratio is cold / warm.

    .venv/bin/python benchmarks/bench_startup.py [--runs 2]
    .venv/bin/python benchmarks/bench_startup.py --warm-only [--runs 3]
    .venv/bin/python benchmarks/bench_startup.py --demo [--runs 1] [--demo-seconds 120]
    .venv/bin/python benchmarks/bench_startup.py --python-epochs 50 [--runs 2]

A cold ``ddflow run`` compiles the kernels in parallel processes of a lower priority and runs each
as Python until it is compiled, saying so on stderr; the cold figure includes the Python epochs.

``--demo`` times a new user's first ``ddflow demo`` (its own embedded broker, the default graph) on
an empty cache: from launch to the first results in its view (a status line with reachable pairs),
and to every kernel compiled (the last ``compiling kernels (first run): N/N`` line), with the
changes final by then. Its same-run baseline is what the first results cost when a first run
waited for the compilation (as before the Python tier): ``ddflow compile`` on an empty cache, then
``ddflow demo`` on the filled one to its first results.

``--python-epochs C`` times what a first run computes before its kernels are compiled: reachability
1k/2k (``library.reachability`` on ``testing.window_edges``, 10 roots), the initial graph and then C
single-change epochs, with every kernel run as Python (``ddflow.operators.kernels.interpreted``),
against the same epochs on the compiled kernels (the same-run baseline), each in a process of its
own after a small warm-up (kernels loaded, twins made), CPU seconds; both outputs are checked equal.

``--warm-only`` times, on the cache already there (``NUMBA_CACHE_DIR`` or beside the sources; what it lacks compiled first, untimed), each run: ``python -c "import numba"``
(the same-run baseline), ``ddflow compile`` with nothing to compile, and ``ddflow run`` to ready,
in wall and CPU seconds (the daemon's CPU includes its stop after ready). The project's modules
are byte-compiled first, as an installed package has them (where ``PYTHONDONTWRITEBYTECODE`` is
set a checkout would compile them again in every process); ``--no-bytecode`` instead finds no
``.pyc`` at all (``PYTHONPYCACHEPREFIX`` an empty directory), as an image that ships none and
writes none.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from ddflow.daemon.kafka.broker import EmbeddedBroker
from ddflow.daemon.kafka.client import ensure_topics
from ddflow.daemon.kafka.producer import UpdateProducer

DDFLOW = str(Path(sys.executable).with_name("ddflow"))
EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "examples" / "reachability.toml"


def warm_up(cache: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ddflow.operators.kernels.warm"], check=True, capture_output=True,
                   env={**os.environ, "NUMBA_CACHE_DIR": str(cache)}, timeout=900)
    return time.perf_counter() - start


def config(directory: Path, bootstrap: str) -> tuple[Path, str]:
    suffix = uuid.uuid4().hex[:8]
    text = EXAMPLE.read_text()
    for topic in ("edges-dead-letters", "edges", "reachable"):
        text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
    text = text.replace('group_id = "ddflow-reachability"', f'group_id = "bench-{suffix}"')
    text = text.replace('address = "127.0.0.1:9464"', 'address = "127.0.0.1:0"')
    path = directory / f"reachability-{suffix}.toml"
    path.write_text(text)
    options = {"bootstrap.servers": bootstrap}
    ensure_topics(options, {f"edges-{suffix}": 1, f"reachable-{suffix}": 1, f"edges-dead-letters-{suffix}": 1})
    producer = UpdateProducer(f"edges-{suffix}", options)
    for k in range(1000):
        producer.send([k % 1000, (k * 7 + 1) % 1000], 1_000_000 + k, 1)
    producer.advance_to(2_000_000)
    producer.flush()
    return path, bootstrap


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a command run to its end."""
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env, timeout=600)
    return time.perf_counter() - start, children_cpu() - cpu


def run_to_ready(path: Path, bootstrap: str, cache: Path | None, env: dict[str, str] | None = None) -> float:
    env = {**(os.environ if env is None else env), "KAFKA_BOOTSTRAP": bootstrap}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    proc = subprocess.Popen([DDFLOW, "run", "--config", str(path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in proc.stdout:  # the daemon logs where it serves its endpoints
            if "metrics on http://" in line:
                url = line.split("metrics on ", 1)[1].split("/metrics", 1)[0]
                break
        assert url, "the daemon never logged its metrics address"
        while True:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                    if response.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"the daemon exited {proc.returncode}:\n{proc.stdout.read()}")
            assert time.perf_counter() - start < 600, "not ready after 600 s"
            time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(60)


def warm_only(tmp_path: Path, bootstrap: str, runs: int, no_bytecode: bool) -> None:
    from ddflow.daemon.cli.commands import compile_kernels

    compile_kernels()
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    if no_bytecode:
        (tmp_path / "no-pyc").mkdir()
        env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "no-pyc")
    else:
        for package in ("config", "daemon", "operators"):
            compileall.compile_dir(root / package, quiet=1)
    for _ in range(runs):
        numba_wall, numba_cpu = timed([sys.executable, "-c", "import numba"], env)
        compile_wall, compile_cpu = timed([DDFLOW, "compile"], env)
        cpu = children_cpu()
        ready = run_to_ready(*config(tmp_path, bootstrap), None, env)
        ready_cpu = children_cpu() - cpu
        print(f"warm{' (no .pyc)' if no_bytecode else ''}: import numba {numba_wall:.2f} s ({numba_cpu:.2f} CPU); "
              f"ddflow compile {compile_wall:.2f} s ({compile_cpu:.2f} CPU, x{compile_cpu / numba_cpu:.2f}); "
              f"ddflow run to ready {ready:.2f} s ({ready_cpu:.2f} CPU to its stop, x{ready_cpu / numba_cpu:.2f})",
              flush=True)


def demo_first_results(cache: Path, seconds: float) -> tuple[float, float | None, int]:
    """``ddflow demo --duration seconds`` on ``cache``: (seconds to the first results, seconds to the
    last kernel compiled or None, changes final at the end)."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    env["NUMBA_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    proc = subprocess.Popen([DDFLOW, "demo", "--duration", str(seconds)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    first = compiled = None
    final = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.perf_counter() - start
        if first is None and " | pairs " in line and not line.split(" | pairs ")[1].startswith("0 "):
            first = now
        if "compiling kernels (first run): " in line:
            done, total = line.split("): ", 1)[1].split()[0].split("/")
            if done == total and done != "0":
                compiled = now
        if " | final " in line:
            final = int(line.split(" | final ")[1].split()[0].replace(",", ""))
    if proc.wait(timeout=600) != 0 or first is None:
        raise SystemExit(f"ddflow demo exited {proc.returncode} (first results: {first})")
    return first, compiled, final


def demo(tmp_path: Path, runs: int, seconds: float) -> None:
    for i in range(runs):
        cache = tmp_path / f"demo{i}"
        first, compiled, final = demo_first_results(cache, seconds)
        shutil.rmtree(cache, ignore_errors=True)
        compile_wall, _ = timed([DDFLOW, "compile"], {**os.environ, "NUMBA_CACHE_DIR": str(cache)})
        warm_first, _, _ = demo_first_results(cache, 5)
        waited = compile_wall + warm_first
        print(f"ddflow demo on an empty cache: first results {first:.1f} s, every kernel compiled "
              f"{'after ' + format(compiled, '.1f') + ' s' if compiled else f'not within {seconds:g} s'}, "
              f"{final:,} changes final in {seconds:g} s; waiting for the compilation instead: "
              f"ddflow compile {compile_wall:.1f} s + first results {warm_first:.1f} s warm = {waited:.1f} s "
              f"-> x{first / waited:.2f}", flush=True)
        shutil.rmtree(cache, ignore_errors=True)


def tier_epochs(tier: str, changes: int) -> None:
    """(In a process of its own) reachability 1k/2k with the kernels of ``tier`` ("python" or
    "compiled"): prints the initial graph's CPU, the changes' CPU and a digest of the output."""
    import hashlib

    from ddflow.operators import Dataflow
    from ddflow.operators.library import reachability
    from ddflow.operators.testing import window_edges

    if tier == "python":
        from ddflow.daemon.cli.commands import KERNEL_PACKAGES, kernel_jobs
        from ddflow.operators.kernels.interpreted import interpret

        interpret(kernel_jobs(), KERNEL_PACKAGES)
    small = Dataflow()  # loads the kernels (or makes their twins) before the clock
    few, start = small.new_input("edges"), small.new_input("roots")
    reachability(start.collection, few.collection).capture()
    start.insert(0, 0)
    for t, edge in enumerate(((0, 1), (1, 2), (2, 0), (0, 1)), 1):
        few.update(edge, t, 1 if t < 4 else -1)
        few.advance_to(t + 1)
        start.advance_to(t + 1)
        small.run()
    nodes, window = 1000, 2000
    e = window_edges(nodes, window, changes).tolist()
    df = Dataflow()
    edges, roots = df.new_input("edges"), df.new_input("roots")
    out = reachability(roots.collection, edges.collection).capture()
    for r in range(10):
        roots.insert(r, 0)
    for i in range(window):
        edges.insert(tuple(e[i]), 0)
    edges.advance_to(1)
    roots.advance_to(1)
    cpu = time.process_time()
    df.run()
    initial, cpu = time.process_time() - cpu, time.process_time()
    for k in range(changes):
        edges.remove(tuple(e[k]), 1 + k)
        edges.insert(tuple(e[window + k]), 1 + k)
        edges.advance_to(2 + k)
        roots.advance_to(2 + k)
        df.run()
    digest = hashlib.sha256(repr(sorted(map(repr, out.updates))).encode()).hexdigest()[:16]
    print(initial, time.process_time() - cpu, digest)


def python_epochs(runs: int, changes: int) -> None:
    for _ in range(runs):
        figures = {}
        for tier in ("python", "compiled"):
            out = subprocess.run([sys.executable, __file__, "--tier", tier, "--python-epochs", str(changes)],
                                 check=True, capture_output=True, text=True, timeout=900)
            initial, epochs, digest = out.stdout.split()
            figures[tier] = float(initial), float(epochs), digest
        (pi, pe, pd), (ci, ce, cd) = figures["python"], figures["compiled"]
        if pd != cd:
            raise SystemExit(f"the outputs differ: {pd} (kernels as Python) against {cd} (compiled)")
        print(f"kernels as Python: initial graph {pi:.2f} s CPU, {changes} single changes {pe:.2f} s "
              f"({pe / changes * 1e3:.1f} ms each); compiled: {ci:.3f} s, {ce:.3f} s ({ce / changes * 1e3:.2f} ms "
              f"each) -> x{pi / ci:.0f} / x{pe / ce:.0f}; outputs equal", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="cold/warm pairs (each cold one with a fresh cache)")
    parser.add_argument("--warm-only", action="store_true",
                        help="only warm starts (import numba, ddflow compile, ddflow run to ready) on the cache there")
    parser.add_argument("--no-bytecode", action="store_true", help="warm starts finding no .pyc (with --warm-only)")
    parser.add_argument("--demo", action="store_true",
                        help="only a first ddflow demo on an empty cache: first results, every kernel compiled")
    parser.add_argument("--demo-seconds", type=float, default=120.0, help="how long the cold demo runs (--demo)")
    parser.add_argument("--python-epochs", type=int, metavar="C",
                        help="only reachability's initial graph and C single changes with every kernel as Python, "
                             "against compiled")
    parser.add_argument("--tier", choices=("python", "compiled"), help=argparse.SUPPRESS)  # (its child processes)
    args = parser.parse_args()
    if args.tier:
        tier_epochs(args.tier, args.python_epochs)
        return
    if args.python_epochs:
        python_epochs(args.runs, args.python_epochs)
        return
    if args.demo:
        with tempfile.TemporaryDirectory() as tmp:
            demo(Path(tmp), args.runs, args.demo_seconds)
        return
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        tmp_path = Path(tmp)
        if args.warm_only:
            warm_only(tmp_path, broker.bootstrap, args.runs, args.no_bytecode)
            return
        for i in range(args.runs):
            cache = tmp_path / f"cache{i}"
            cold, warm = warm_up(cache), warm_up(cache)
            print(f"kernels.warm: cold {cold:5.1f} s (compile), warm {warm:5.1f} s (load) -> {cold / warm:.1f}x")
            shutil.rmtree(cache, ignore_errors=True)
            cold = run_to_ready(*config(tmp_path, broker.bootstrap), cache)
            warm = run_to_ready(*config(tmp_path, broker.bootstrap), cache)
            print(f"ddflow run to ready: cold {cold:5.1f} s, warm {warm:5.1f} s -> {cold / warm:.1f}x")


if __name__ == "__main__":
    main()
