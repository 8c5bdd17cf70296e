"""Kernels: pure functions on int64 columns that do the per-row work of an operator step."""
