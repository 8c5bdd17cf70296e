"""Metrics of the engine, computed from the dataflow when Prometheus scrapes.

Arrangement sizes and compaction work (``Dataflow.arrangement_stats``) and the user functions'
remembered results (``Dataflow.operator_stats``) are costly to keep live and cheap to read once per
scrape. Their ``arrangement`` and ``operator`` labels are the names the dataflow gave
(``Collection.name``: ``views.by_key``) or the operator's kind and user function
(``map(parse_view)``, ``map(parse_view).by_key``): a series leads back to the code that made it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ArrangementCollector", "OperatorCollector"]

log = logging.getLogger("ddflow.daemon.observe.metrics")


class _ScrapedStats(Collector):
    """A collector whose families are computed from a stats callable at each scrape.

    ``stats`` returns ``{label: {field: int}}`` or ``None`` before a dataflow exists. The engine is
    mutated by the worker thread while a scrape runs; a read that trips over that (a ``RuntimeError``
    such as "dictionary changed size during iteration") is retried ``attempts`` times, then the
    scrape shows no series of these families rather than failing. Subclasses give ``_families``
    and ``what`` (the warning's words).
    """

    what = "engine stats"

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, int]] | None], *, attempts: int = 3) -> None:
        self.stats = stats
        self.attempts = attempts

    def describe(self) -> Iterable[Metric]:
        return self._families({})

    def collect(self) -> Iterable[Metric]:
        for attempt in range(self.attempts):
            try:
                return self._families(self.stats() or {})
            except RuntimeError:
                if attempt + 1 == self.attempts:
                    log.warning("%s unavailable during this scrape", self.what, exc_info=True)
        return self._families({})

    @staticmethod
    def _families(stats: Mapping[str, Mapping[str, int]]) -> list[Metric]:
        raise NotImplementedError


class ArrangementCollector(_ScrapedStats):
    """Arrangement sizes and compaction work, computed from the engine when Prometheus scrapes.

    ``stats`` returns ``{arrangement: {"records", "batches", "bytes", "merge_work"}}``
    (``Dataflow.arrangement_stats``) or ``None`` before a dataflow exists. The engine is mutated by
    the worker thread while a scrape runs; a read that trips over that is retried, then skipped.
    """

    what = "arrangement stats"

    @staticmethod
    def _families(stats: Mapping[str, Mapping[str, int]]) -> list[Metric]:
        records = GaugeMetricFamily("ddflow_arrangement_records", "Updates held by the arrangement's trace.",
                                    labels=["arrangement"])
        batches = GaugeMetricFamily("ddflow_arrangement_batches", "Batches in the trace's spine.",
                                    labels=["arrangement"])
        size = GaugeMetricFamily("ddflow_arrangement_bytes", "Bytes of the trace's numpy columns.",
                                 labels=["arrangement"])
        merged = CounterMetricFamily("ddflow_compaction_merge_records",
                                     "Records processed by spine merges (compaction work).", labels=["arrangement"])
        for name, row in sorted(stats.items()):
            records.add_metric([name], row.get("records", 0))
            batches.add_metric([name], row.get("batches", 0))
            size.add_metric([name], row.get("bytes", 0))
            merged.add_metric([name], row.get("merge_work", 0))
        return [records, batches, size, merged]


class OperatorCollector(_ScrapedStats):
    """Per operator that remembers its user function's results: the distinct records it holds
    results of, and their bytes, from ``Dataflow.operator_stats`` at scrape time. The ``operator``
    label is the name the dataflow gave (``Collection.name``) or the operator's kind and function
    (``map(parse_view)``): a series leads back to the line of code that made it."""

    what = "operator stats"

    @staticmethod
    def _families(stats: Mapping[str, Mapping[str, int]]) -> list[Metric]:
        records = GaugeMetricFamily("ddflow_operator_memo_records",
                                    "Distinct records whose user-function results the operator remembers.",
                                    labels=["operator"])
        size = GaugeMetricFamily("ddflow_operator_memo_bytes", "Bytes of the operator's remembered results.",
                                 labels=["operator"])
        for name, row in sorted(stats.items()):
            records.add_metric([name], row.get("memo_records", 0))
            size.add_metric([name], row.get("memo_bytes", 0))
        return [records, size]
