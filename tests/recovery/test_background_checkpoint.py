"""A worker's first background checkpoint does no one-time start-up work.

A checkpoint written in a background thread is lost when the worker crashes before it is renamed
into place (the one before is restored). pyarrow's first conversion of Python values imports
pandas - about a second on 2 shared cores while the worker loop holds the GIL - and that used to
happen inside the first background write of every worker process, so a worker crashing within a
second of starting never left a checkpoint: each restart replayed its inputs from the beginning
(publishing nothing new while it caught up) and the reclock bindings were never compacted. The
start-up is now paid when the worker is built; the write itself imports nothing. Checked in a
fresh interpreter, where nothing was imported before.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ddflow.daemon.state.checkpoint import CheckpointStore

SCRIPT = """
import itertools, json, sys
from ddflow.daemon.state.recovery import Recovery
from ddflow.daemon.input.source import InputSpec
from ddflow.operators import Dataflow

spec = InputSpec("a", "t", fields={"key": "int", "val": "int"}, policy="reclock")
seconds = itertools.count()  # a clock moved by hand: one second per reading, so a checkpoint is due
recovery = Recovery([spec], {"bootstrap.servers": "127.0.0.1:9"}, directory=sys.argv[1], interval=0.1,
                    monotonic=lambda: next(seconds))
df = Dataflow()
session = df.new_input("a")
recovery.attach({"a": session.state()})
session.update_many([(i, i % 7) for i in range(30)], [1000 + i for i in range(30)], [1] * 30)
session.advance_to(1010)
df.run()
before = set(sys.modules)
recovery.epoch_published(1010, {("t", 0): 30})  # as after the worker's first epoch: a background write
assert recovery._writer is not None, "no checkpoint was started in the background"
recovery.finish()
print(json.dumps({"imported": sorted(set(sys.modules) - before),
                  "written": [s.frontier for s in recovery.written]}))
"""


def test_the_first_background_checkpoint_imports_nothing(tmp_path):
    directory = tmp_path / "ckpt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["imported"] == [], f"the first write imported {len(result['imported'])} modules"
    assert result["written"] == [1010]
    restored = CheckpointStore(directory).latest()
    assert restored is not None and restored.frontier == 1010
    base, pending = restored.read_input("a")
    assert sorted(base) == sorted(((i, i % 7), 1) for i in range(10))  # times < 1010, folded
    assert sorted(pending) == [((i, i % 7), 1000 + i, 1) for i in range(10, 30)]
    assert restored.inputs["a"].offsets == {0: 30}
