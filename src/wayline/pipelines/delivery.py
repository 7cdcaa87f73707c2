"""`wayline run delivery`: every event topic → parse → match → send, one micro-batch at a time.

Two streaming queries, started and stopped together (:class:`DeliveryJob`):

*matching* (``foreachBatch``, driven from the driver), per micro-batch:

1. takes the current registry snapshot — swapped when the registry version moved,
   polled at most every ``delivery.version_poll_s`` (:class:`~wayline.delivery.holder.SnapshotHolder`);
2. parses the records; bad ones go to the quarantine topic unchanged;
3. matches events to subscriptions (broadcast equi-join plus compiled filters, in the
   JVM) and routes each pair by its subscription's delivery mode;
4. batch mode: cuts each subscription shard's pairs into full batches, and hands the
   leftovers to the batching query over the batch topic (:mod:`wayline.pipelines.batching`);
5. sends the streaming pairs and the full batches in one send step
   (:mod:`wayline.pipelines.sending`) — except to endpoints whose latest retry failed
   (read at most every ``delivery.version_poll_s``): those go to the retry path unsent;
6. adds the counts the tasks return to the metrics, and disables in the registry every
   subscription whose endpoint answered 410.

*batching* (started once some subscription is in batch mode, or an earlier run left
leftovers): the leftovers wait in a stateful operator until their batch is full or
``max_wait`` has passed, then go through the same send step.

Both queries share one snapshot holder, one metrics object and the send step, so a
batch is signed, limited, deadlined and recorded exactly like a single event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from wayline.core.envelope import BINARY_PREFIX
from wayline.core.errors import RejectedInput
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.batch import DEFAULT_MAX_COUNT, DEFAULT_MAX_WAIT
from wayline.delivery.bucket import Source
from wayline.delivery.holder import Polled, SnapshotHolder
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary, Tally
from wayline.delivery.stage import StageSettings
from wayline.delivery.storage.drain import RetryQueue
from wayline.delivery.targets import Target, target_of
from wayline.pipelines.batching import BATCH_TOPIC_CONFIG, bundles, chunk_batch_pairs, full_batches, start_batching
from wayline.pipelines.envelope import ENVELOPE_COLUMNS, parse_events
from wayline.pipelines.matching import match_events, match_keys_frame
from wayline.pipelines.micro_batch import concise_failures
from wayline.pipelines.sending import PartitionSender, send, task_settings
from wayline.pipelines.source import delivered_topic_pattern, read_kafka, write_quarantine, write_to_kafka
from wayline.registry import subscription
from wayline.registry.access import Caller
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.snapshot import Snapshot, load_snapshot

_log = logging.getLogger(__name__)

STREAMING = "streaming"
BATCH = "batch"
ROUTES_SCHEMA = "subscription_id string, endpoint_id string, mode string, max_count int, max_wait_ms int"
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
    has_batch: bool
    """Some subscription is in batch mode."""

    @property
    def version(self) -> int:
        return self.snapshot.version


def load_live_snapshot(spark: SparkSession, database: Database, endpoints: EndpointService) -> LiveSnapshot:
    with database.transaction() as session:
        snapshot = load_snapshot(session, endpoints)
    default_wait_ms = round(DEFAULT_MAX_WAIT.total_seconds() * 1000)
    routes = spark.createDataFrame(
        [
            (s.id, s.endpoint_id, s.mode, s.max_count or DEFAULT_MAX_COUNT, s.max_wait_ms or default_wait_ms)
            for s in snapshot.subscriptions.values()
        ],
        ROUTES_SCHEMA,
    )
    # Decrypted credentials reach the executors in this broadcast, never in DataFrame rows.
    targets = spark.sparkContext.broadcast({e.id: target_of(e) for e in snapshot.endpoints.values()})
    has_batch = any(s.mode == BATCH for s in snapshot.subscriptions.values())
    return LiveSnapshot(snapshot, match_keys_frame(spark, snapshot), routes, targets, has_batch)


def single_deliveries(pairs: DataFrame) -> DataFrame:
    """Streaming-mode pairs as deliveries (:data:`~wayline.pipelines.sending.SEND_SCHEMA`): one request each."""
    return pairs.where(F.col("mode") == F.lit(STREAMING)).select(
        F.lit("single").alias("kind"), "subscription_id", "endpoint_id", F.array("id").alias("event_ids"), "body",
    )


@contextmanager
def timed(phases: Counter[str], phase: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[phase] += time.perf_counter() - started


def send_pairs(
    pairs: DataFrame, modes: set[str | None], source: Source, settings: Settings, sender: PartitionSender,
    phases: Counter[str],
) -> tuple[Tally, int]:
    """Send the streaming pairs and every full batch; hand batch leftovers to the batching
    query. Returns what was sent, and how many pairs now wait for their batch."""
    deliveries = single_deliveries(pairs)
    partitions = settings.delivery.send_partitions
    if BATCH not in modes:
        with timed(phases, "send"):
            return (send(deliveries, sender, partitions) if STREAMING in modes else Tally()), 0
    chunks = chunk_batch_pairs(pairs.where(F.col("mode") == F.lit(BATCH)), settings.delivery.batch_shards).persist()
    try:
        with timed(phases, "batch"):
            held = chunks.where(~F.col("full")).agg(F.sum(F.size("event_ids"))).first()[0] or 0
            if held:
                write_to_kafka(bundles(chunks, settings.delivery.batch_topic, source), settings)
        with timed(phases, "send"):
            return send(deliveries.unionByName(full_batches(chunks)), sender, partitions), held
    finally:
        chunks.unpersist()


def deliver_micro_batch(
    batch: DataFrame, source: Source, live: LiveSnapshot, settings: Settings, sender: PartitionSender,
) -> BatchSummary:
    """Quarantine, match and send one micro-batch; batch-mode leftovers to the batch topic. What happened, in counts."""
    phases: Counter[str] = Counter()
    # One task per core, not per Kafka partition: a micro-batch runs several jobs over the
    # cached rows, and hundreds of tiny tasks per job cost more than the work itself.
    batch = batch.coalesce(batch.sparkSession.sparkContext.defaultParallelism)
    parsed = parse_events(batch, max_bytes=settings.envelope.max_bytes).persist()
    try:
        with timed(phases, "parse"):
            by_reason = {row["reason"]: row["count"] for row in parsed.groupBy("reason").count().collect()}
        quarantined = Counter({reason: count for reason, count in by_reason.items() if reason is not None})
        if quarantined:
            with timed(phases, "quarantine"):
                write_quarantine(parsed, settings)
        pairs = match_events(events_with_bodies(parsed), live.keys, live.snapshot).join(
            F.broadcast(live.routes), "subscription_id",
        ).persist()
        try:
            with timed(phases, "match"):
                # One pass: pairs per mode, and (the rollup's total row) distinct events matched.
                per_mode = {
                    row["mode"]: (row["pairs"], row["events"])
                    for row in pairs.rollup("mode").agg(
                        F.count(F.lit(1)).alias("pairs"),
                        F.count_distinct("topic", "partition", "offset").alias("events"),
                    ).collect()
                }
            tally, held = send_pairs(pairs, set(per_mode), source, settings, sender, phases)
        finally:
            pairs.unpersist()
    finally:
        parsed.unpersist()
    events = by_reason.get(None, 0)
    return BatchSummary(
        events=events,
        quarantined=quarantined,
        filtered=events - per_mode.get(None, (0, 0))[1],
        held=held,
        phase_seconds=phases,
        deliveries=tally,
        batches=1,
        registry_version=live.version,
    )


GONE_REASON = "its endpoint answered 410 Gone"


def disable_gone(database: Database, subscription_ids: set[str]) -> None:
    """Disable the subscriptions whose endpoint answered 410 Gone (the version bump swaps them out)."""
    for subscription_id in sorted(subscription_ids):
        try:
            with database.transaction() as session:
                subscription.update(session, DELIVERY_CALLER, subscription_id,
                                    subscription.SubscriptionPatch(enabled=False, disabled_reason=GONE_REASON))
        except RejectedInput as exc:
            # Deleted meanwhile, or no longer valid as it stands: its 410s keep being handed over.
            _log.warning("could not disable subscription %s after 410 Gone: %s", subscription_id, exc)
        else:
            _log.warning("disabled subscription %s: its endpoint answered 410 Gone", subscription_id)


class DeliveryJob:
    """The matching query and, once any subscription is in batch mode, the batching query:
    run as one job, stopped together."""

    def __init__(self, matching: StreamingQuery, start_batching: Callable[[], StreamingQuery],
                 holder: SnapshotHolder[LiveSnapshot]) -> None:
        self.matching = matching
        self._holder = holder
        self.batching: StreamingQuery | None = None
        self._start_batching = start_batching
        self._lock = threading.Lock()
        self._stopped = False

    def ensure_batching(self) -> None:
        """Start the batching query unless it runs: an idle one still costs a micro-batch
        per trigger (see ``wayline.pipelines.batching``), so it starts only when needed."""
        with self._lock:
            # A micro-batch still running when the job stops must not start it afresh.
            if self.batching is None and not self._stopped:
                self.batching = self._start_batching()

    @property
    def registry_version(self) -> int:
        """The registry version the next micro-batch delivers with (read at most every ``version_poll_s``)."""
        return self._holder.current().version

    @property
    def queries(self) -> list[StreamingQuery]:
        with self._lock:
            return [self.matching] if self.batching is None else [self.matching, self.batching]

    @property
    def isActive(self) -> bool:  # noqa: N802 - reads like StreamingQuery's
        return all(query.isActive for query in self.queries)

    def exception(self) -> Exception | None:
        for query in self.queries:
            failure = query.exception()
            if failure is not None:
                return failure
        return None

    def await_termination(self, timeout_s: float) -> None:
        """Wait for the matching query to end (an ``availableNow`` run does). The batching
        query never ends on its own: Spark keeps running a processing-time stateful query
        for its timers, so stop the job afterwards."""
        self.matching.awaitTermination(timeout_s)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        for query in self.queries:
            query.stop()


def start_delivery(
    spark: SparkSession,
    settings: Settings,
    database: Database,
    endpoints: EndpointService,
    metrics: DeliveryMetrics,
    *,
    checkpoint: Path | None = None,
    available_now: bool = False,
) -> DeliveryJob:
    """Start the delivery job. The first snapshot is loaded before it starts, so a
    registry that cannot be read is an error here rather than in a query thread."""
    holder = SnapshotHolder(
        load=lambda: load_live_snapshot(spark, database, endpoints),
        version=database.current_version,
        poll_s=settings.delivery.version_poll_s,
        retire=lambda live: live.targets.unpersist(),
    )
    holder.current()
    ensure_topics(settings.kafka_bootstrap(), [settings.delivery.batch_topic], settings.kafka.topic_partitions,
                  BATCH_TOPIC_CONFIG)
    for_tasks = task_settings(settings)
    stage = StageSettings.from_settings(settings.delivery)
    queue = RetryQueue(database.engine)
    failing = Polled(queue.failing_now if settings.delivery.defer_failing else frozenset, frozenset(),
                     settings.delivery.version_poll_s)

    def sender(live: LiveSnapshot) -> PartitionSender:
        return PartitionSender(live.targets, for_tasks, stage, failing.current())

    root = checkpoint or settings.checkpoint_root / "delivery"
    # The matching query's id names the run its bundles come from; it is known once start() returns.
    matching_id: list[str] = []
    started = threading.Event()

    def record(summary: BatchSummary) -> None:
        metrics.add(summary)  # thread-safe: each query calls from its own thread
        gone = summary.deliveries.gone_subscriptions()
        if gone:
            disable_gone(database, gone)
            # Whichever query runs next sends with the registry as it is now.
            holder.refresh()

    def match_and_send(batch: DataFrame, batch_id: int) -> None:
        started.wait()
        live = holder.current()
        if live.has_batch:
            job.ensure_batching()
        record(deliver_micro_batch(batch, Source(matching_id[0], batch_id), live, settings, sender(live)))

    def send_ready(batch: DataFrame, _batch_id: int) -> None:
        live = holder.current()
        phases: Counter[str] = Counter()
        with timed(phases, "send_ready_batches"):
            tally = send(batch, sender(live), settings.delivery.send_partitions)
        record(BatchSummary(deliveries=tally, registry_version=live.version, phase_seconds=phases))

    writer = (
        read_kafka(spark, settings, delivered_topic_pattern(settings))
        .writeStream.queryName("wayline-delivery")
        .option("checkpointLocation", str(root / "matching"))
        .foreachBatch(concise_failures("wayline-delivery", match_and_send))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{round(settings.delivery.trigger_interval_s * 1000)} milliseconds")
    job = DeliveryJob(writer.start(), lambda: start_batching(
        spark, settings, concise_failures("wayline-delivery-batching", send_ready), str(root / "batching"),
        available_now=available_now,
    ), holder)
    # Leftovers of an earlier run (in its state or on the topic) are delivered even if no
    # subscription is in batch mode any more.
    if holder.current().has_batch or (root / "batching").exists():
        job.ensure_batching()
    matching_id.append(job.matching.id)
    started.set()
    return job


__all__ = [
    "BATCH",
    "DELIVERY_CALLER",
    "ROUTES_SCHEMA",
    "STREAMING",
    "DeliveryJob",
    "LiveSnapshot",
    "deliver_micro_batch",
    "disable_gone",
    "event_body",
    "events_with_bodies",
    "load_live_snapshot",
    "send_pairs",
    "single_deliveries",
    "timed",
    "start_delivery",
]
