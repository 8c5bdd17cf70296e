"""Operator nodes of a dataflow graph: linear, arrange, join, reduce, iterate."""
