"""Prometheus gauges for reconciliations, read from the job's tables when scraped.

Per (reconciliation, source): the newest published window's completeness and counts;
per reconciliation: the ids missing now and the watermark. Read from PostgreSQL rather
than the job's memory, so any process (the job, the admin API's host) can serve them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select

from wayline.recon import store
from wayline.registry.db import Database
from wayline.registry.models import Reconciliation


class ReconMetrics(Collector):
    def __init__(self, database: Database) -> None:
        self._database = database

    def collect(self) -> Iterator[Metric]:
        completeness = GaugeMetricFamily("wayline_recon_completeness_percent",
                                         "matched / expected of the newest published window",
                                         labels=["reconciliation", "source"])
        window = GaugeMetricFamily("wayline_recon_window_ids", "the newest published window's counts",
                                   labels=["reconciliation", "source", "figure"])
        missing = GaugeMetricFamily("wayline_recon_missing_ids", "ids reported missing and not found since",
                                    labels=["reconciliation"])
        watermark = GaugeMetricFamily("wayline_recon_watermark_seconds", "the reconciliation's watermark",
                                      labels=["reconciliation"])
        with self._database.transaction() as session:
            names = {row.id: row.name for row in session.execute(select(Reconciliation.id, Reconciliation.name))}
            for published in store.latest_published(session):
                name = names.get(published.reconciliation_id, published.reconciliation_id)
                completeness.add_metric([name, published.source], published.completeness)
                for figure, value in vars(published.counts).items():
                    window.add_metric([name, published.source, figure], value)
            for recon_id, name in names.items():
                missing.add_metric([name], store.missing_count(session, recon_id))
                mark = store.watermark(session, recon_id)
                if mark is not None:
                    watermark.add_metric([name], mark / 1000)
        yield from (completeness, window, missing, watermark)


__all__ = ["ReconMetrics"]
