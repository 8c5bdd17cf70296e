"""Watching a running daemon: the data path's counters, Prometheus metrics, HTTP endpoints.

`stats` (plain counters the sources, sinks and worker keep), `metrics` (turns them into Prometheus
families at scrape time), `health` (``/metrics``, ``/healthz``, ``/readyz``), `rejections` (dead
letters said in the log, rate-limited per reason).

May import: `exceptions` and third-party clients only (nothing else of the daemon): every other
layer reports into it.
"""
