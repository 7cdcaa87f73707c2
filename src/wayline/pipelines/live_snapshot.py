"""The registry snapshot as a running delivery job holds it: published for ``wayline_routes``, with its targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark import Broadcast
from pyspark.sql import Column, SparkSession

from wayline.delivery.routing_table import publish
from wayline.delivery.targets import Target, target_of
from wayline.pipelines.matching import routing
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.snapshot import Snapshot, load_snapshot

STREAMING = "streaming"
BATCH = "batch"


@dataclass(frozen=True)
class LiveSnapshot:
    snapshot: Snapshot
    folder: Path
    """Where its routing table is published (:mod:`wayline.delivery.routing_table`)."""
    targets: Broadcast[dict[str, Target]]
    has_batch: bool
    """Some subscription is in batch mode."""

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def routes(self) -> Column:
        """This version's routes (:func:`~wayline.pipelines.matching.routing`), for a plan
        made with it, such as a micro-batch's."""
        return routing(self.folder, self.version)


def load_live_snapshot(spark: SparkSession, database: Database, endpoints: EndpointService,
                       folder: Path) -> LiveSnapshot:
    """The registry as it is now, its routing table published in ``folder`` and made the one
    that queries following the folder route with."""
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    publish(folder, snapshot)
    # Decrypted credentials reach the executors in this broadcast, never in DataFrame rows.
    targets = spark.sparkContext.broadcast({e.id: target_of(e) for e in snapshot.endpoints.values()})
    has_batch = any(s.mode == BATCH for s in snapshot.subscriptions.values())
    return LiveSnapshot(snapshot, folder, targets, has_batch)


__all__ = ["BATCH", "STREAMING", "LiveSnapshot", "load_live_snapshot"]
