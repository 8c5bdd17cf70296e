"""Before/after in one process: another benchmark run with reductions looking every key up in their
traces each round (``Reduce.keeps_history = False``, the engine before kept histories), then keeping
their keys' histories between rounds (the default), alternating ``--repeat`` times.

    .venv/bin/python benchmarks/bench_reduce_history.py [--repeat 1] bench_reachability.py --epochs 1000 ...

Each run prints its own figures (CPU time per change, same-run baselines) under a header naming the
mode; compare the two modes' lines.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ddflow.operators.nodes.reduce.node import Reduce

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("bench", help="a benchmark script of this folder")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    sys.path.insert(0, str(HERE))
    bench = importlib.import_module(Path(a.bench).stem)
    for _ in range(a.repeat):
        for keeps in (False, True):
            Reduce.keeps_history = keeps
            print(f"=== reductions {'keep histories' if keeps else 'look every key up (before)'} ===", flush=True)
            sys.argv = [a.bench, *a.args]
            bench.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
