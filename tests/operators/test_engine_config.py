"""The engine configuration: one object per dataflow, validated, reaching every trace and node."""

from __future__ import annotations

import pytest

from ddflow.operators import Dataflow, DataflowError, GraphError
from ddflow.operators.tuning import EngineConfig
from ddflow.operators.errors import ConfigurationError


@pytest.mark.parametrize("knob", ["merge_fuel_per_update", "merge_min_fuel", "memo_limit", "reduce_chunk_keys",
                                  "user_chunk"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_a_knob_out_of_range_is_refused_naming_it(knob, bad):
    with pytest.raises(ConfigurationError, match=f"EngineConfig.{knob} must be a positive int") as info:
        EngineConfig(**{knob: bad})
    assert isinstance(info.value, DataflowError)


def test_dataflow_takes_only_an_engine_config():
    with pytest.raises(GraphError, match="takes an EngineConfig, got dict"):
        Dataflow(config={"memo_limit": 5})


def test_the_config_reaches_traces_memos_and_reductions():
    config = EngineConfig(merge_fuel_per_update=3, merge_min_fuel=7, memo_limit=11, user_chunk=5)
    df = Dataflow(config=config)
    xs = df.new_input("xs")
    counted = xs.collection.map(lambda x: x % 3).count()
    probe = counted.capture()
    for x in range(20):
        xs.insert(x, x)
    xs.advance_to(20)
    df.run()
    assert probe.at(19) == {(0, 7): 1, (1, 7): 1, (2, 6): 1}
    nodes = list(df._all_nodes())
    spines = [spine for node in nodes for _, spine in node.arrangements()]
    assert spines and all((s.fuel_per_update, s.min_fuel) == (3, 7) for s in spines)
    memos = [node.memo for node in nodes if hasattr(node, "memo")]
    assert memos and all(m.limit == 11 for m in memos)
    assert df.interner.memo_limit == 11
    logics = [node.logic for node in nodes if hasattr(node, "logic")]
    assert logics and all(logic.chunk == 5 for logic in logics)
