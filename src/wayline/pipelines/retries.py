"""`wayline run retries`: the query that drains the retry store, buries the dead and
disables endpoints that have failed for too long.

A rate source is only the clock: one micro-batch every ``delivery.retry_poll_s``, with a
checkpoint like any query. Each micro-batch (``foreachBatch``, on the driver):

1. takes the registry snapshot's endpoints as targets (broadcast, swapped when the
   registry version moves, as in the delivery job);
2. if any entry is due, runs one drain task per shard of endpoints (``mapInArrow`` over the shard numbers):
   each task claims its shard's due entries from PostgreSQL itself, attempts them through
   the same stage pieces as the main path and settles them
   (:mod:`wayline.delivery.storage.drain`) — payloads never pass through the driver;
3. disables the subscriptions whose endpoint answered 410;
4. moves the entries no attempt is left for into the dead-letter store, and announces
   each on the operations topic before that move commits;
5. disables endpoints whose retries have failed for ``delivery.disable_after_s``, with the
   reason, announced the same way;
6. every ten minutes, deletes delivery history older than ``delivery.history_retention_s``
   and dead letters older than ``delivery.dead_letter_retention_s``, in small batches.

Why PostgreSQL and not a Kafka retry topic: see docs/decisions.md ("Retries and dead letters").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming import StreamingQuery

from wayline.core.errors import RejectedInput
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.attempt import State
from wayline.delivery.audit import RETRIES
from wayline.delivery.holder import SnapshotHolder
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.operations import OperationsProducer, dead_lettered_events, endpoint_disabled_event
from wayline.delivery.outcomes import BatchSummary, Tally
from wayline.delivery.runtime.registry_changes import DELIVERY_CALLER, disable_gone
from wayline.delivery.runtime.send_step import write_outcomes
from wayline.delivery.runtime.worker import worker_pool
from wayline.delivery.stage import StageSettings
from wayline.delivery.storage.drain import Failing, RetryQueue, run_retry_stage
from wayline.delivery.targets import Target, target_of
from wayline.pipelines.delivery import ensure_delivery_topics
from wayline.pipelines.micro_batch import concise_failures
from wayline.pipelines.sending import TALLY_SCHEMA, task_settings
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointPatch, EndpointService
from wayline.registry.snapshot import load_snapshot

_log = logging.getLogger(__name__)

# Dead entries moved per transaction; the rest wait for the next micro-batch.
BURY_LIMIT = 5000
# Rows of each table deleted per retention transaction, and how often retention runs.
EXPIRE_LIMIT = 10_000
RETENTION_POLL_S = 600.0


@dataclass(frozen=True)
class LiveTargets:
    version: int
    targets: Broadcast[dict[str, Target]]


def load_targets(spark: SparkSession, database: Database, endpoints: EndpointService) -> LiveTargets:
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    # Decrypted credentials reach the executors in this broadcast only.
    targets = spark.sparkContext.broadcast({e.id: target_of(e) for e in snapshot.endpoints.values()})
    return LiveTargets(snapshot.version, targets)


class ShardDrainer:
    """The ``mapInArrow`` step: shard numbers → claim, attempt, settle each shard → tally rows."""

    def __init__(self, targets: Broadcast[dict[str, Target]], settings: Settings, stage: StageSettings,
                 shards: int, claim_limit: int, lease: timedelta) -> None:
        self._targets = targets
        self._settings = settings
        self._stage = stage
        self._shards = shards
        self._claim_limit = claim_limit
        self._lease = lease

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        shards = [shard for batch in batches for shard in batch.column("shard").to_pylist()]
        if not shards:
            return
        pool = worker_pool(self._settings)
        tally = Tally()
        settled: list[State] = []
        for shard in shards:
            claims = pool.queue.claim(shard, self._shards, self._claim_limit, self._lease, datetime.now(timezone.utc))
            tally.merge(run_retry_stage(claims, self._targets.value, pool.queue, pool.transport, self._stage,
                                        run=pool.run, on_settled=settled.extend))
        write_outcomes(pool, self._settings, settled, {}, RETRIES)
        yield pa.RecordBatch.from_pylist(tally.rows(), schema=TALLY_SCHEMA)


def drain(spark: SparkSession, drainer: ShardDrainer, shards: int) -> Tally:
    frame = spark.range(0, shards, numPartitions=shards).withColumnRenamed("id", "shard")
    rows = frame.mapInArrow(drainer, from_arrow_schema(TALLY_SCHEMA)).collect()
    return Tally.from_rows(row.asDict() for row in rows)


def disable_failing(database: Database, endpoints: EndpointService, failing: Failing, failing_for: timedelta,
                    producer: OperationsProducer, now: datetime) -> None:
    """Disable one endpoint that keeps failing; the announcement goes out before the change commits."""
    days = failing_for.total_seconds() / 86_400
    reason = (f"disabled automatically: every delivery has failed since {failing.since:%Y-%m-%d %H:%M} UTC "
              f"(over {days:g} days); last error: {failing.last_error}")[:500]
    try:
        with database.transaction() as session:
            disabled = endpoints.update(session, DELIVERY_CALLER, failing.endpoint_id,
                                        EndpointPatch(enabled=False, disabled_reason=reason))
            producer.publish([endpoint_disabled_event(failing, disabled.customer_id, reason, now)])
    except RejectedInput as exc:
        _log.warning("could not disable failing endpoint %s: %s", failing.endpoint_id, exc)
    else:
        _log.warning("disabled endpoint %s: %s", failing.endpoint_id, reason)


def start_retries(
    spark: SparkSession,
    settings: Settings,
    database: Database,
    endpoints: EndpointService,
    metrics: DeliveryMetrics | None = None,
    *,
    checkpoint: Path | None = None,
) -> StreamingQuery:
    """Start the retry query (its first snapshot is loaded here, so a bad registry fails now)."""
    delivery = settings.delivery
    holder = SnapshotHolder(
        load=lambda: load_targets(spark, database, endpoints),
        version=database.current_version,
        poll_s=delivery.version_poll_s,
        retire=lambda live: live.targets.unpersist(),
    )
    holder.current()
    ensure_topics(settings.kafka_bootstrap(), [delivery.operations_topic], settings.kafka.topic_partitions)
    ensure_delivery_topics(settings)  # the self-audit's outcomes of what this path settles
    producer = OperationsProducer(settings.kafka_bootstrap(), delivery.operations_topic)
    queue = RetryQueue(database.engine)
    for_tasks = task_settings(settings)
    # The slow endpoints the delivery job cuts as stragglers are this path's work: it waits
    # for them until the deadline.
    stage = replace(StageSettings.from_settings(delivery), straggler_cut_s=None)
    lease = timedelta(seconds=delivery.retry_lease_s)
    failing_for = timedelta(seconds=delivery.disable_after_s)
    history_for = timedelta(seconds=delivery.history_retention_s)
    dead_letters_for = timedelta(seconds=delivery.dead_letter_retention_s)
    expire_at = [0.0]  # monotonic time of the next retention pass
    shards = delivery.send_partitions

    def tick(_batch: DataFrame, _batch_id: int) -> None:
        # A Spark job only when something is due: an idle drain would still take both task
        # slots of a small cluster from the delivery job every poll.
        if queue.any_due(datetime.now(timezone.utc)):
            live = holder.current()
            drainer = ShardDrainer(live.targets, for_tasks, stage, shards, delivery.retry_claim_limit, lease)
            tally = drain(spark, drainer, shards)
            if metrics is not None:
                metrics.add(BatchSummary(deliveries=tally, registry_version=live.version))
            gone = tally.gone_subscriptions()
            if gone:
                disable_gone(database, gone)
                holder.refresh()
        now = datetime.now(timezone.utc)
        while len(queue.bury(BURY_LIMIT, now, lambda buried: producer.publish(dead_lettered_events(buried)))) \
                == BURY_LIMIT:
            pass
        for failing in queue.failing_endpoints(failing_for, now):
            disable_failing(database, endpoints, failing, failing_for, producer, now)
        if time.monotonic() >= expire_at[0]:
            expire_at[0] = time.monotonic() + RETENTION_POLL_S
            while queue.expire(now - history_for, now - dead_letters_for, EXPIRE_LIMIT):
                pass

    root = checkpoint or settings.checkpoint_root / "retries"
    return (
        spark.readStream.format("rate").option("rowsPerSecond", 1).load()
        .writeStream.queryName("wayline-retries")
        .option("checkpointLocation", str(root))
        .trigger(processingTime=f"{round(delivery.retry_poll_s * 1000)} milliseconds")
        .foreachBatch(concise_failures("wayline-retries", tick))
        .start()
    )


__all__ = ["BURY_LIMIT", "LiveTargets", "ShardDrainer", "disable_failing", "drain", "load_targets", "start_retries"]
