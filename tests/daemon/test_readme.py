"""The result-topic example of docs/formats.md runs as written (broker address and topic names swapped in)."""

from __future__ import annotations

import pytest

from ddflow.daemon.input.progress import EpochPolicy
from ddflow.daemon.output.sink import OutputSpec
from ddflow.daemon.input.source import InputSpec
from ddflow.daemon.factory import kafka_worker
from support.docs import DOCS, example
from test_worker import Background

pytestmark = pytest.mark.kafka

PAGE = DOCS / "formats.md"


def snippet() -> str:
    return example("result-client", "python")


def test_readme_result_client_snippet(kafka_options, make_topic, capsys):
    edges, reachable = make_topic("edges", partitions=2), make_topic("reachable", partitions=2)
    code = snippet()
    assert '"127.0.0.1:9092"' in code and '"edges"' in code and '"reachable"' in code
    code = (code.replace('"127.0.0.1:9092"', repr(kafka_options["bootstrap.servers"]))
                .replace('"edges"', repr(edges)).replace('"reachable"', repr(reachable)))
    worker = kafka_worker(lambda df, inputs: {"reachable": inputs["edges"]},
                    [InputSpec("edges", edges, fields=["src", "dst"])], [OutputSpec("reachable", reachable)],
                    kafka_options, group_id=f"g-{edges}", epochs=EpochPolicy(resolution_ns=1_000_000))
    with Background(worker):
        exec(compile(code, str(PAGE), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "2000000000 {(0, 1): 1}"
