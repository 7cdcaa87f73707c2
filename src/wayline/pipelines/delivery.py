"""`wayline run delivery`: every event topic → parse → match → send, one micro-batch at a time.

Each micro-batch (``foreachBatch``, driven from the driver):

1. takes the current registry snapshot — swapped when the registry version moved,
   polled at most every ``delivery.version_poll_s`` (:class:`~wayline.delivery.holder.SnapshotHolder`);
2. parses the records; bad ones go to the quarantine topic unchanged;
3. matches events to subscriptions (broadcast equi-join plus compiled filters, in the
   JVM) and routes each pair by its subscription's delivery mode;
4. sends the streaming pairs from the executors: repartitioned by endpoint (so one
   endpoint's limits hold in one task), then ``mapInArrow`` runs one delivery stage per
   task (:func:`~wayline.delivery.stage.run_stage`: one aiohttp transport and dispatcher,
   the stage deadline, the delivery log and retry store written by the task itself);
5. adds the counts the tasks return to the metrics, and disables in the registry every
   subscription whose endpoint answered 410.

Why the tasks write the log and the retry store themselves: the retry store keeps each
undelivered payload, which would otherwise travel to the driver and be written by one
process; the driver receives only a few count rows per (endpoint, subscription).
Outcomes are written before the micro-batch commits, so a replay finds them.

Batch-mode subscriptions are matched and counted (``wayline_pairs_unsent_total``) but
not sent: their stage will route the pairs of ``mode = 'batch'`` the same way.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
from pydantic import SecretStr
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming import StreamingQuery
from sqlalchemy.exc import OperationalError

from wayline.core.envelope import BINARY_PREFIX
from wayline.core.errors import RejectedInput, RetryLater
from wayline.core.settings import PostgresSettings, Settings
from wayline.delivery.attempt import Pending
from wayline.delivery.holder import SnapshotHolder
from wayline.delivery.http_client import AiohttpTransport
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary, Outcome, Tally
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.store import PostgresDeliveryStore
from wayline.delivery.targets import Target, target_of
from wayline.pipelines.envelope import ENVELOPE_COLUMNS, parse_events, quarantine_records
from wayline.pipelines.matching import match_events, match_keys_frame
from wayline.pipelines.source import read_kafka, write_to_kafka
from wayline.registry import subscription
from wayline.registry.access import Caller
from wayline.registry.db import Database, make_engine
from wayline.registry.endpoint import EndpointService
from wayline.registry.snapshot import Snapshot, load_snapshot

_log = logging.getLogger(__name__)

STREAMING = "streaming"
ROUTES_SCHEMA = "subscription_id string, endpoint_id string, mode string"
PAIR_COLUMNS = ("id", "subscription_id", "endpoint_id", "body")
# The rows of `Tally.rows()`, as each sending task returns them. Arrow is the source of
# truth: the tasks build their batches with it and have no JVM to parse a DDL string.
TALLY_SCHEMA = pa.schema([
    ("endpoint_id", pa.string()),
    ("subscription_id", pa.string()),
    *((outcome.value, pa.int64()) for outcome in Outcome),
    ("gone", pa.int64()),
    ("failures", pa.map_(pa.string(), pa.int64())),
    ("latency_sum_s", pa.float64()),
    ("latency_buckets", pa.list_(pa.int64())),
])
# Registry changes the job makes on its own (410 Gone) are an operator's, not a customer's.
DELIVERY_CALLER = Caller(key_id="wayline-delivery", customer_id=None)


def event_body() -> Column:
    """The structured-mode CloudEvent JSON an endpoint receives for an event, as bytes.

    A structured-mode record is sent as it came: its Kafka value, byte for byte. For a
    binary-mode record the JSON is assembled in the JVM: one member per ``ce_`` header
    (the first of a repeated header wins, as in the parser; every extension is kept, as
    a string), then ``data``: the record's value, which the parser has checked is JSON,
    spliced in unchanged.
    """
    prefix = F.lit(BINARY_PREFIX)
    binary = F.exists("headers", lambda h: h["key"] == F.lit(f"{BINARY_PREFIX}specversion"))
    attributes = F.filter(
        "headers",
        lambda h, i: F.startswith(h["key"], prefix)
        & (h["key"] != F.lit(f"{BINARY_PREFIX}data"))
        & h["value"].isNotNull()
        & ~F.exists(F.slice("headers", F.lit(1), i), lambda earlier: earlier["key"] == h["key"]),
    )
    members = F.to_json(F.map_from_entries(F.transform(
        attributes,
        lambda h: F.struct(
            h["key"].substr(F.lit(len(BINARY_PREFIX) + 1), F.length(h["key"])), h["value"].cast("string"),
        ),
    )))
    assembled = F.concat(
        members.substr(F.lit(1), F.length(members) - 1), F.lit(',"data":'), F.col("value").cast("string"), F.lit("}"),
    )
    return F.when(binary, assembled.cast("binary")).otherwise(F.col("value"))


def events_with_bodies(parsed: DataFrame) -> DataFrame:
    """The valid events (as `valid_events` gives them) plus `body`, built from the raw record."""
    return parsed.where(F.col("reason").isNull()).select(
        *ENVELOPE_COLUMNS, "topic", "partition", "offset", event_body().alias("body"),
    )


@dataclass(frozen=True)
class LiveSnapshot:
    """A registry snapshot with what the Spark job derives from it once per version."""

    snapshot: Snapshot
    keys: DataFrame
    routes: DataFrame
    targets: Broadcast[dict[str, Target]]

    @property
    def version(self) -> int:
        return self.snapshot.version


def load_live_snapshot(spark: SparkSession, database: Database, endpoints: EndpointService) -> LiveSnapshot:
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    routes = spark.createDataFrame(
        [(s.id, s.endpoint_id, s.mode) for s in snapshot.subscriptions.values()], ROUTES_SCHEMA,
    )
    # Decrypted credentials reach the executors in this broadcast, never in DataFrame rows.
    targets = spark.sparkContext.broadcast({e.id: target_of(e) for e in snapshot.endpoints.values()})
    return LiveSnapshot(snapshot, match_keys_frame(spark, snapshot), routes, targets)


class PartitionSender:
    """The ``mapInArrow`` step: one task's streaming pairs → one delivery stage → its tally rows.

    Holds only picklable values (``settings`` as :func:`task_settings` makes them); the
    transport, the dispatcher and the database engine are made inside the task and closed
    before it ends.
    """

    def __init__(self, targets: Broadcast[dict[str, Target]], settings: Settings, stage: StageSettings) -> None:
        self._targets = targets
        self._settings = settings
        self._stage = stage

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        now = datetime.now(timezone.utc)
        # The HTTP edge: per-row Python is where the rows become signed requests anyway.
        pendings = [
            Pending.single(row["id"], row["body"], subscription_id=row["subscription_id"],
                           endpoint_id=row["endpoint_id"], now=now)
            for batch in batches
            for row in batch.to_pylist()
        ]
        if not pendings:
            return
        engine = make_engine(self._settings)
        try:
            tally = run_stage(
                pendings, self._targets.value, PostgresDeliveryStore(engine), AiohttpTransport, self._stage,
            )
        finally:
            engine.dispose()
        yield pa.RecordBatch.from_pylist(tally.rows(), schema=TALLY_SCHEMA)


def task_settings(settings: Settings) -> Settings:
    """What the sending tasks get of the settings: the database address, resolved here on
    the driver (executors have no local stack file), and nothing else — no encryption keys."""
    return Settings.model_construct(postgres=PostgresSettings(dsn=SecretStr(settings.postgres_dsn())))


def deliver_micro_batch(
    batch: DataFrame, live: LiveSnapshot, settings: Settings, sender: PartitionSender,
) -> BatchSummary:
    """Quarantine, match and send one micro-batch (streaming pairs through ``sender``); what happened, in counts."""
    parsed = parse_events(batch, max_bytes=settings.envelope.max_bytes).persist()
    try:
        by_reason = {row["reason"]: row["count"] for row in parsed.groupBy("reason").count().collect()}
        quarantined = Counter({reason: count for reason, count in by_reason.items() if reason is not None})
        if quarantined:
            write_to_kafka(quarantine_records(parsed, settings.kafka.quarantine_topic), settings)
        pairs = match_events(events_with_bodies(parsed), live.keys, live.snapshot).join(
            F.broadcast(live.routes), "subscription_id",
        ).persist()
        try:
            # One pass: pairs per mode, and (the rollup's total row) distinct events matched.
            per_mode = {
                row["mode"]: (row["pairs"], row["events"])
                for row in pairs.rollup("mode").agg(
                    F.count(F.lit(1)).alias("pairs"), F.count_distinct("topic", "partition", "offset").alias("events"),
                ).collect()
            }
            deliveries = Tally()
            if STREAMING in per_mode:
                sent = (
                    pairs.where(F.col("mode") == F.lit(STREAMING))
                    .select(*PAIR_COLUMNS)
                    .repartition(settings.delivery.send_partitions, "endpoint_id")
                    .mapInArrow(sender, from_arrow_schema(TALLY_SCHEMA))
                )
                deliveries = Tally.from_rows(row.asDict() for row in sent.collect())
        finally:
            pairs.unpersist()
    finally:
        parsed.unpersist()
    events = by_reason.get(None, 0)
    return BatchSummary(
        events=events,
        quarantined=quarantined,
        filtered=events - per_mode.get(None, (0, 0))[1],
        unsent=Counter({mode: n for mode, (n, _) in per_mode.items() if mode not in (None, STREAMING)}),
        deliveries=deliveries,
        batches=1,
        registry_version=live.version,
    )


def _registry_version(database: Database) -> int:
    try:
        return database.current_version()
    except OperationalError as exc:
        # A transient outage: the holder keeps the snapshot it has and polls again.
        raise RetryLater(f"the registry database is unreachable: {exc.orig}") from exc


def disable_gone(database: Database, subscription_ids: set[str]) -> None:
    """Disable the subscriptions whose endpoint answered 410 Gone (the version bump swaps them out)."""
    for subscription_id in sorted(subscription_ids):
        try:
            with database.transaction() as session:
                subscription.update(session, DELIVERY_CALLER, subscription_id,
                                    subscription.SubscriptionPatch(enabled=False))
        except RejectedInput as exc:
            # Deleted meanwhile, or no longer valid as it stands: its 410s keep being handed over.
            _log.warning("could not disable subscription %s after 410 Gone: %s", subscription_id, exc)
        else:
            _log.warning("disabled subscription %s: its endpoint answered 410 Gone", subscription_id)


def start_delivery(
    spark: SparkSession,
    settings: Settings,
    database: Database,
    endpoints: EndpointService,
    metrics: DeliveryMetrics,
    *,
    checkpoint: Path | None = None,
    available_now: bool = False,
) -> StreamingQuery:
    """Start the delivery query. The first snapshot is loaded before it starts, so a
    registry that cannot be read is an error here rather than in the query thread."""
    holder = SnapshotHolder(
        load=lambda: load_live_snapshot(spark, database, endpoints),
        version=lambda: _registry_version(database),
        poll_s=settings.delivery.version_poll_s,
        retire=lambda live: live.targets.unpersist(),
    )
    holder.current()
    for_tasks = task_settings(settings)
    stage = StageSettings.from_settings(settings.delivery)

    def process(batch: DataFrame, _batch_id: int) -> None:
        live = holder.current()
        summary = deliver_micro_batch(batch, live, settings, PartitionSender(live.targets, for_tasks, stage))
        metrics.add(summary)
        disable_gone(database, summary.deliveries.gone_subscriptions())

    writer = (
        read_kafka(spark, settings)
        .writeStream.queryName("wayline-delivery")
        .option("checkpointLocation", str(checkpoint or settings.checkpoint_root / "delivery"))
        .foreachBatch(process)
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    interval_ms = round(settings.delivery.trigger_interval_s * 1000)
    return writer.trigger(processingTime=f"{interval_ms} milliseconds").start()


__all__ = [
    "DELIVERY_CALLER",
    "PAIR_COLUMNS",
    "ROUTES_SCHEMA",
    "STREAMING",
    "TALLY_SCHEMA",
    "LiveSnapshot",
    "PartitionSender",
    "deliver_micro_batch",
    "disable_gone",
    "event_body",
    "events_with_bodies",
    "load_live_snapshot",
    "start_delivery",
    "task_settings",
]
