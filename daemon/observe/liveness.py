"""The broker's liveness as metrics: whether it answers, and when it last did (`kafka.liveness`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["BrokerCollector"]


class BrokerCollector(Collector):
    """``ddflow_broker_answering`` (1 while the broker answers, 0 while it is silent or not reached
    yet) and ``ddflow_broker_last_answer_timestamp_seconds`` (0 before any answer), read at scrape
    time from the `kafka.liveness.BrokerWatch` that ``watch()`` returns (None: not watched yet, both 0)."""

    def __init__(self, watch: Callable[[], Any]) -> None:
        self._watch = watch

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        return self._families(self._watch())

    @staticmethod
    def _families(watch: Any) -> list[Metric]:
        answering = GaugeMetricFamily("ddflow_broker_answering",
                                      "1 while the broker answers metadata requests, 0 while it is silent (frozen, "
                                      "unreachable, not up yet).", value=int(watch is not None and watch.answering))
        last = GaugeMetricFamily("ddflow_broker_last_answer_timestamp_seconds",
                                 "Unix time of the broker's last answer (0: none yet).",
                                 value=(watch.answered_wall if watch is not None else None) or 0.0)
        return [answering, last]
