"""Config texts the config tests start from and vary one key at a time."""

from __future__ import annotations

# A complete, valid daemon config: one input, one output, the library's reachability dataflow.
VALID = """
[dataflow]
function = "ddflow.config.dataflows:reachability"
args = { roots = [0, 1] }

[kafka]
bootstrap = "127.0.0.1:9092"

[[inputs]]
name = "edges"
topic = "edges"
fields = { src = "int", dst = "int" }

[[outputs]]
name = "reachable"
topic = "reachable"
"""
