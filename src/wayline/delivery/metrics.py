"""The delivery job's Prometheus metrics, served by the driver from the micro-batches' summaries.

The tasks never touch Prometheus: each returns its tally, the driver adds every
micro-batch's :class:`~wayline.delivery.outcomes.BatchSummary` here, and a scrape
renders the running totals. Deliveries are counted per endpoint and subscription;
failure reasons and the latency histogram per endpoint only, to bound the number of series.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from wayline.delivery.outcomes import LATENCY_BUCKETS_S, BatchSummary, Outcome


@dataclass(frozen=True)
class Overview:
    """The headline figures of the running totals, cheap to take as often as a view refreshes."""

    batches: int
    events: int
    filtered: int
    quarantined: int
    held: int
    deliveries: Counter[Outcome]


class DeliveryMetrics(Collector):
    """Running totals since the job started; thread-safe (the query thread adds, scrapes read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = BatchSummary()

    def add(self, batch: BatchSummary) -> None:
        with self._lock:
            self._totals.merge(batch)

    def totals(self) -> BatchSummary:
        """A full copy, per pair: costly with tens of thousands of subscriptions (see :meth:`overview`)."""
        with self._lock:
            return copy.deepcopy(self._totals)

    def overview(self) -> Overview:
        with self._lock:
            totals = self._totals
            return Overview(
                batches=totals.batches, events=totals.events, filtered=totals.filtered,
                quarantined=sum(totals.quarantined.values()), held=totals.held,
                deliveries=Counter({outcome: totals.deliveries.total(outcome) for outcome in Outcome}),
            )

    def collect(self) -> Iterator[Metric]:
        # Rendered under the lock rather than from a copy: copying every pair's tally costs
        # far more than holding up one micro-batch's `add` for the length of a scrape.
        with self._lock:
            return iter(self._families(self._totals))

    @staticmethod
    def _families(totals: BatchSummary) -> list[Metric]:
        deliveries = CounterMetricFamily(
            "wayline_deliveries", "Deliveries by endpoint, subscription and outcome",
            labels=["endpoint", "subscription", "outcome"],
        )
        failures = CounterMetricFamily(
            "wayline_delivery_failures", "Failed attempts by endpoint and reason (http_<status>, timeout, deadline…)",
            labels=["endpoint", "reason"],
        )
        latency = HistogramMetricFamily(
            "wayline_delivery_latency_seconds", "Time for an endpoint to answer an attempt", labels=["endpoint"],
        )
        failures_by_endpoint: dict[str, Counter[str]] = defaultdict(Counter)
        latency_by_endpoint: dict[str, tuple[list[int], float]] = {}
        for (endpoint, subscription), pair in totals.deliveries.items():
            for outcome in Outcome:
                deliveries.add_metric([endpoint, subscription, outcome.value], pair.outcomes[outcome])
            failures_by_endpoint[endpoint].update(pair.failures)
            buckets, total = latency_by_endpoint.get(endpoint, ([0] * len(pair.latency_buckets), 0.0))
            latency_by_endpoint[endpoint] = (
                [a + b for a, b in zip(buckets, pair.latency_buckets, strict=True)], total + pair.latency_sum_s,
            )
        for endpoint, reasons in failures_by_endpoint.items():
            for reason, count in reasons.items():
                failures.add_metric([endpoint, reason], count)
        bounds = [*(f"{bound:g}" for bound in LATENCY_BUCKETS_S), "+Inf"]
        for endpoint, (buckets, total) in latency_by_endpoint.items():
            cumulative = list(itertools.accumulate(buckets))
            latency.add_metric([endpoint], list(zip(bounds, cumulative, strict=True)), total)

        quarantined = CounterMetricFamily(
            "wayline_events_quarantined", "Records sent to quarantine, by reason", labels=["reason"],
        )
        for reason, count in totals.quarantined.items():
            quarantined.add_metric([reason], count)
        phases = CounterMetricFamily(
            "wayline_micro_batch_seconds", "Wall time spent in each step of the micro-batches", labels=["phase"],
        )
        for phase, seconds in sorted(totals.phase_seconds.items()):
            phases.add_metric([phase], seconds)
        return [
            phases,
            deliveries,
            failures,
            latency,
            CounterMetricFamily("wayline_events", "Valid events read", value=totals.events),
            CounterMetricFamily("wayline_events_filtered", "Valid events that matched no subscription",
                                value=totals.filtered),
            quarantined,
            CounterMetricFamily("wayline_batch_pairs_held",
                                "Batch-mode pairs set aside to wait for their batch (the batching query's, or a "
                                "sender process's open batches)", value=totals.held),
            CounterMetricFamily("wayline_micro_batches", "Micro-batches processed", value=totals.batches),
            GaugeMetricFamily("wayline_registry_version", "Registry version of the snapshot in use",
                              value=totals.registry_version),
        ]


__all__ = ["DeliveryMetrics", "Overview"]
