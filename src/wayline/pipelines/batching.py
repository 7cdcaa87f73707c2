"""Batch mode: count-or-time batching per subscription shard, in two steps.

1. In the matching query's micro-batch (a static DataFrame, in the JVM): the batch-mode
   pairs are grouped per batch key — (subscription, shard), the shard
   ``pmod(crc32(event id), delivery.batch_shards)`` as :func:`~wayline.delivery.batch.shard_for`
   computes it — sorted by event id and cut into chunks of ``max_count``. Every full
   chunk is a batch, sent at once by the same send step as single events: a subscription
   whose micro-batch alone fills batches keeps no state for them. Each key's leftover
   (fewer than ``max_count``) becomes one *bundle*, written to the internal
   ``delivery.batch_topic`` keyed by its batch key. The chunks are cut from the same
   shuffle (by endpoint) that takes streaming deliveries to the sending tasks, and the
   tasks write the bundles: one Spark job per micro-batch (:mod:`~wayline.pipelines.routing`).
2. The batching query reads that topic and runs a ``transformWithStateInPandas``
   operator keyed by *bucket* (a hash of the batch key into ``delivery.batch_buckets``):
   each bucket's pending items live in one RocksDB value
   (:class:`~wayline.delivery.bucket.Bucket`) with one processing-time timer at its
   earliest deadline (or, with nothing pending, when its replay guard may be
   forgotten). Batches that fill up or whose ``max_wait`` passes are emitted and sent by the shared send step in the batching query's ``foreachBatch``.

Sorting by event id makes the chunks of a replayed micro-batch the same as the first
time, so their webhook ids are too and the delivery log skips them; a bundle handed over
twice is dropped by the bucket. The wait of a leftover starts when the batching query
sees it, a trigger interval after the matching query read its events, and the batch goes
out at the first batching micro-batch after its deadline (``delivery.batch_trigger_interval_s``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from wayline.core.settings import Settings
from wayline.delivery.batch import BatchItem, BatchKey, BatchLimits
from wayline.delivery.bucket import Bucket, Bundle, ReadyBatch, Source
from wayline.pipelines.sending import SEND_SCHEMA

if TYPE_CHECKING:
    import pandas as pd

KEY_COLUMNS = ("subscription_id", "endpoint_id", "max_count", "max_wait_ms", "shard")
BUNDLE_SCHEMA = (
    "subscription_id string, endpoint_id string, max_count int, max_wait_ms int, shard int, "
    "run string, batch_id long, event_ids array<string>, bodies array<string>"
)
BUCKET_STATE_SCHEMA = "blob binary, timer_ms long"
# Bundles can hold up to max_count - 1 events of up to a few KB each.
MAX_BUNDLE_BYTES = 32 * 1024 * 1024
BATCH_TOPIC_CONFIG = {"max.message.bytes": str(MAX_BUNDLE_BYTES), "retention.ms": str(7 * 24 * 3600 * 1000)}


def batch_work(pairs: DataFrame, shards: int, topic: str, source: Source) -> DataFrame:
    """Batch-mode pairs → work rows (:data:`~wayline.pipelines.sending.WORK_SCHEMA`): per
    batch key, its events (once per event id) sorted by id and cut into chunks of
    ``max_count``; a full chunk is a ``batch`` request, the leftover a ``record`` for the
    batch topic (a bundle keyed by its batch key).

    ``pairs`` has ``event_id``, ``body``, ``events`` and the route columns; its
    ``events`` add up to the first chunk of each key.
    """
    group, aggregates, cut, present = _chunking(shards, topic)
    # The source goes in as text: a number literal is written into the generated code,
    # which would then be compiled afresh for every micro-batch.
    source_json = F.lit(orjson.dumps({"run": source.run, "batch_id": source.batch_id}).decode()[1:-1])
    return pairs.groupBy(*group).agg(*aggregates).select(*cut).select(*present(source_json))


@functools.cache
def _chunking(shards: int, topic: str) -> tuple[
    list[Column], list[Column], list[Column | str], Callable[[Column], list[Column | str]],
]:
    """``batch_work``'s Columns, made once (see ``envelope._parse_steps``)."""
    group = [F.col(name) for name in KEY_COLUMNS[:-1]] + [shard_of(F.col("event_id"), shards).alias("shard")]
    # The same event twice (a duplicate on Kafka) goes once; sorted, copies are neighbours.
    items = F.filter("_sorted", lambda item, i: (i == 0) | (item["id"] != F.element_at("_sorted", i)["id"]))
    starts = F.sequence(F.lit(0), F.size(items) - 1, F.col("max_count"))
    cut: list[Column | str] = [
        *KEY_COLUMNS, "_events",
        F.posexplode(F.transform(starts, lambda start: F.slice(items, start + 1, F.col("max_count")))),
    ]
    full = F.size("col") == F.col("max_count")

    def present(source_json: Column) -> list[Column | str]:
        return [
            F.when(full, F.lit("batch")).otherwise(F.lit("record")).alias("kind"),
            "subscription_id", "endpoint_id", F.col("col.id").alias("event_ids"),
            F.when(full, F.concat(F.lit("["), F.array_join("col.body", ","), F.lit("]")).cast("binary"))
            .otherwise(bundle_value(F.col("col.id"), F.col("col.body"), source_json)).alias("body"),
            F.when(~full, F.lit(topic)).alias("topic"),
            F.when(~full, bundle_key()).alias("key"),
            F.when(F.col("pos") == 0, F.col("_events")).otherwise(F.lit(0)).alias("events"),
        ]

    aggregates = [
        F.array_sort(F.collect_list(F.struct(F.col("event_id").alias("id"), F.col("body").cast("string").alias("body"))))
        .alias("_sorted"),
        F.sum("events").cast("int").alias("_events"),
    ]
    return group, aggregates, cut, present


def shard_of(event_id: Column, shards: int) -> Column:
    """The batch shard of an event, as :func:`~wayline.delivery.batch.shard_for` computes it."""
    return F.pmod(F.crc32(event_id.cast("binary")), F.lit(shards)).cast("int")


def bundle_key() -> Column:
    """A bundle's Kafka key, its batch key, over the :data:`KEY_COLUMNS`."""
    return F.concat_ws(":", "subscription_id", "shard").cast("binary")


def bundle_value(event_ids: Column, bodies: Column, source_json: Column) -> Column:
    """A bundle as the batching query reads it (:data:`BUNDLE_SCHEMA`), over the
    :data:`KEY_COLUMNS`: its events' ids and bodies (text), and ``source_json``, the
    ``"run":…,"batch_id":…`` members that name where it came from (the replay guard)."""
    bundle = F.to_json(F.struct(*KEY_COLUMNS, event_ids.alias("event_ids"), bodies.alias("bodies")))
    return F.concat(bundle.substr(F.lit(1), F.length(bundle) - 1), F.lit(","), source_json, F.lit("}")).cast("binary")


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _bundles_of(frames: Iterator[pd.DataFrame]) -> Iterator[Bundle]:
    for frame in frames:
        # Per key, older micro-batches first: the bucket's replay guard relies on it.
        for row in frame.sort_values("batch_id", kind="stable").itertuples(index=False):
            items = tuple(BatchItem(i, body.encode("utf-8")) for i, body in zip(row.event_ids, row.bodies, strict=True))
            yield Bundle(
                BatchKey(row.subscription_id, int(row.shard)), row.endpoint_id,
                BatchLimits(int(row.max_count), timedelta(milliseconds=int(row.max_wait_ms))),
                items, Source(row.run, int(row.batch_id)),
            )


class BatchingProcessor(StatefulProcessor):
    """One bucket per grouping key: a blob and the one timer at its earliest deadline."""

    def __init__(self, remember: timedelta) -> None:
        self._remember = remember

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.getValueState("bucket", BUCKET_STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        now = _at(timerValues.getCurrentProcessingTimeInMs())
        bucket, timer_ms = self._load()
        ready = bucket.add(_bundles_of(rows), now)
        yield from self._keep(bucket, timer_ms, now, ready)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo,
    ) -> Iterator[pd.DataFrame]:
        now = _at(timerValues.getCurrentProcessingTimeInMs())
        bucket, _ = self._load()
        # The timer that fired is spent; _keep sets the next one.
        yield from self._keep(bucket, None, now, bucket.due(now))

    def _load(self) -> tuple[Bucket, int | None]:
        held = self._state.get()
        if held is None:
            return Bucket(self._remember), None
        blob, timer_ms = held
        return Bucket.load(blob, self._remember), timer_ms

    def _keep(self, bucket: Bucket, timer_ms: int | None, now: datetime, ready: list[ReadyBatch]) -> Iterator[pd.DataFrame]:
        blob = bucket.dump(now)
        wake = bucket.wake_at()
        wanted_ms = None if wake is None else round(wake.timestamp() * 1000)
        if timer_ms != wanted_ms:
            if timer_ms is not None:
                self._handle.deleteTimer(timer_ms)
            if wanted_ms is not None:
                self._handle.registerTimer(wanted_ms)
        if blob is None:
            self._state.clear()
        else:
            self._state.update((blob, wanted_ms))
        if ready:
            # Here, in the Python worker, not at the top: the driver of the senders engine
            # imports this module for its plan only and never needs pandas (35 MB resident).
            import pandas as pd

            yield pd.DataFrame({
                "kind": ["batch"] * len(ready),
                "subscription_id": [r.batch.key.subscription_id for r in ready],
                "endpoint_id": [r.endpoint_id for r in ready],
                "event_ids": [list(r.batch.event_ids) for r in ready],
                "body": [r.batch.body for r in ready],
            })


def start_batching(
    spark: SparkSession,
    settings: Settings,
    send_ready: Callable[[DataFrame, int], None],
    checkpoint: str,
    *,
    available_now: bool = False,
) -> StreamingQuery:
    """The batching query: batch topic → buckets with timers → ``send_ready`` per micro-batch."""
    delivery = settings.delivery
    parsed = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
        .option("subscribe", delivery.batch_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", settings.kafka.max_offsets_per_trigger)
        .option("kafka.fetch.max.wait.ms", settings.kafka.fetch_max_wait_ms)
        .option("kafka.max.partition.fetch.bytes", MAX_BUNDLE_BYTES)
        .load()
        .select(F.from_json(F.col("value").cast("string"), BUNDLE_SCHEMA).alias("b"))
        .select("b.*")
    )
    bucket = F.pmod(F.xxhash64("subscription_id", "shard"), F.lit(delivery.batch_buckets))
    ready = parsed.withColumn("bucket", bucket).groupBy("bucket").transformWithStateInPandas(
        BatchingProcessor(timedelta(seconds=delivery.batch_remember_s)),
        outputStructType=SEND_SCHEMA,
        outputMode="Append",
        timeMode="ProcessingTime",
    )
    writer = (
        ready.writeStream.queryName("wayline-delivery-batching")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(send_ready)
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    # Spark runs every trigger of a processing-time stateful operator, new data or not (to
    # fire timers), so this interval is a standing cost, paid even when nothing is pending.
    return writer.trigger(processingTime=f"{round(delivery.batch_trigger_interval_s * 1000)} milliseconds").start()


__all__ = [
    "BATCH_TOPIC_CONFIG",
    "BUCKET_STATE_SCHEMA",
    "BUNDLE_SCHEMA",
    "KEY_COLUMNS",
    "MAX_BUNDLE_BYTES",
    "BatchingProcessor",
    "batch_work",
    "bundle_key",
    "bundle_value",
    "shard_of",
    "start_batching",
]
