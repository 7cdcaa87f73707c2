"""The registry snapshot as a running delivery job holds it: with what Spark derives from it once per version."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession

from wayline.delivery.targets import Target, target_of
from wayline.pipelines.matching import match_table_frame, routes_column
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.snapshot import Snapshot, load_snapshot

STREAMING = "streaming"
BATCH = "batch"


@dataclass(frozen=True)
class LiveSnapshot:
    snapshot: Snapshot
    keys: DataFrame
    """The match table (:func:`~wayline.pipelines.matching.match_table_frame`), broadcast in each micro-batch."""
    routes: Column
    """Its :func:`~wayline.pipelines.matching.routes_column`, made once for every micro-batch."""
    targets: Broadcast[dict[str, Target]]
    has_batch: bool
    """Some subscription is in batch mode."""

    @property
    def version(self) -> int:
        return self.snapshot.version


def load_live_snapshot(spark: SparkSession, database: Database, endpoints: EndpointService) -> LiveSnapshot:
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    # Decrypted credentials reach the executors in this broadcast, never in DataFrame rows.
    targets = spark.sparkContext.broadcast({e.id: target_of(e) for e in snapshot.endpoints.values()})
    has_batch = any(s.mode == BATCH for s in snapshot.subscriptions.values())
    return LiveSnapshot(snapshot, match_table_frame(spark, snapshot), routes_column(snapshot), targets, has_batch)


__all__ = ["BATCH", "STREAMING", "LiveSnapshot", "load_live_snapshot"]
