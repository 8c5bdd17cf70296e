"""What a reduction hands its compiled kernels: writable int64 columns only, whatever its
histories are made of. The kernels are compiled ahead for those types (``kernels.precompile``); a
read-only column (the shared empty batch a concat of no rows gives) made numba compile a second
specialisation of ``reduce_step`` in the middle of a run: seconds of stall and ~100 MB, seen after
130,000 single-change epochs of reachability."""

from __future__ import annotations

import numpy as np

from ddflow.operators import Dataflow
from ddflow.operators.nodes.reduce import kernel
from ddflow.operators.tuning import EngineConfig


def test_a_round_of_kept_and_new_keys_without_output_hands_the_kernel_writable_columns(monkeypatch):
    """Negative multiplicities only: distinct outputs nothing, so the kept key's output history and
    the new key's looked-up one are both empty, and their concat is the shared read-only batch."""
    calls: list[bool] = []
    original = kernel.reduce_step

    def recording(*args):
        calls.append(all(a.flags.writeable for a in args if isinstance(a, np.ndarray)))
        return original(*args)

    monkeypatch.setattr(kernel, "reduce_step", recording)
    df = Dataflow(config=EngineConfig(reduce_history_keys=1))  # histories kept from a round of one key on
    data = df.new_input("data")
    out = data.collection.distinct().capture()
    data.update(5, 1, -1)
    data.advance_to(2)
    df.run()
    data.update(5, 2, -1)  # kept from the first epoch
    data.update(6, 2, -1)  # new
    data.advance_to(3)
    df.run()
    assert out.at(2) == {}
    assert calls and all(calls)
