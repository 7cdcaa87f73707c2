"""`wayline run delivery`: every event topic → parse → match → send, one micro-batch at a time.

Two streaming queries, started and stopped together (:class:`DeliveryJob`):

*matching* (``foreachBatch``, driven from the driver), per micro-batch, in one Spark job
(:mod:`~wayline.pipelines.routing`):

1. takes the current registry snapshot — swapped when the registry version moved,
   polled at most every ``delivery.version_poll_s`` (:class:`~wayline.delivery.holder.SnapshotHolder`);
2. parses the records; bad ones go to the quarantine topic unchanged;
3. matches events to subscriptions (broadcast lookups plus compiled filters, in the
   JVM) and routes each pair by its subscription's delivery mode;
4. batch mode: cuts each subscription shard's pairs into full batches, and hands the
   leftovers to the batching query over the batch topic (:mod:`wayline.pipelines.batching`);
5. the sending tasks (:mod:`wayline.pipelines.sending`) send the streaming pairs and the
   full batches — except to endpoints whose latest retry failed (read at most every
   ``delivery.version_poll_s``): those go to the retry path unsent — write the
   quarantine copies and leftovers to Kafka, and count everything;
6. adds the counts the tasks return to the metrics, and disables in the registry every
   subscription whose endpoint answered 410.

*batching* (started once some subscription is in batch mode, or an earlier run left
leftovers): the leftovers wait in a stateful operator until their batch is full or
``max_wait`` has passed, then go through the same send step.

Both queries share one snapshot holder, one metrics object and the send step, so a
batch is signed, limited, deadlined and recorded exactly like a single event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.core.topics import delivered_topic_pattern
from wayline.delivery.bucket import Source
from wayline.delivery.holder import Polled, SnapshotHolder
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.registry_changes import DELIVERY_CALLER, GONE_REASON, disable_gone
from wayline.delivery.runtime.senders import ensure_work_topics
from wayline.delivery.stage import StageSettings
from wayline.delivery.storage.drain import RetryQueue
from wayline.pipelines.batching import BATCH_TOPIC_CONFIG, start_batching
from wayline.pipelines.live_snapshot import LiveSnapshot, load_live_snapshot
from wayline.pipelines.micro_batch import concise_failures
from wayline.pipelines.routing import micro_batch_work
from wayline.pipelines.sending import PartitionSender, send, task_settings
from wayline.pipelines.source import read_kafka
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService


def ensure_delivery_topics(settings: Settings) -> None:
    """The internal topics the delivery job writes to, besides the quarantine: the batch
    topic, with ``audit.enabled`` the self-audit's two, and with ``delivery.engine =
    "senders"`` the work topic (``delivery.work_partitions`` partitions); and the
    operations topic it reads, made here so that the retry job making it later does not
    change the partitions the job was sized for."""
    bootstrap, partitions = settings.kafka_bootstrap(), settings.kafka.topic_partitions
    ensure_topics(bootstrap, [settings.delivery.batch_topic], partitions, BATCH_TOPIC_CONFIG)
    ensure_topics(bootstrap, [settings.delivery.operations_topic], partitions)
    if settings.delivery.engine == "senders":
        ensure_work_topics(settings)
    if settings.audit.enabled:
        ensure_topics(bootstrap, [settings.audit.consumed_topic, settings.audit.outcomes_topic], partitions)


def deliver_micro_batch(
    batch: DataFrame, source: Source, live: LiveSnapshot, settings: Settings, sender: PartitionSender,
) -> BatchSummary:
    """Quarantine, match and send one micro-batch, batch-mode leftovers to the batch topic,
    in one Spark job (:mod:`~wayline.pipelines.routing`). What happened, in counts."""
    started = time.perf_counter()
    summary = send(micro_batch_work(batch, live, settings, source), sender)
    summary.phase_seconds["micro_batch"] += time.perf_counter() - started
    summary.batches, summary.registry_version = 1, live.version
    return summary


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


class SendStep:
    """The send step with what it needs around it: the snapshot holder's current snapshot,
    the endpoints whose latest retry failed, the metrics, and disabling subscriptions whose
    endpoint answered 410. The matching and batching queries of the micro-batch engine
    share one; with ``delivery.engine = "senders"``, the batching query uses it alone."""

    def __init__(self, settings: Settings, database: Database, holder: SnapshotHolder[LiveSnapshot],
                 metrics: DeliveryMetrics) -> None:
        self._settings = settings
        self._database = database
        self._holder = holder
        self._metrics = metrics
        self._for_tasks = task_settings(settings)
        self._stage = StageSettings.from_settings(settings.delivery)
        queue = RetryQueue(database.engine)
        self._failing = Polled(queue.failing_now if settings.delivery.defer_failing else frozenset, frozenset(),
                               settings.delivery.version_poll_s)

    def sender(self, live: LiveSnapshot) -> PartitionSender:
        return PartitionSender(live.targets, self._for_tasks, self._stage, self._failing.current())

    def record(self, summary: BatchSummary) -> None:
        self._metrics.add(summary)  # thread-safe: each query calls from its own thread
        gone = summary.deliveries.gone_subscriptions()
        if gone:
            disable_gone(self._database, gone)
            # Whichever query runs next sends with the registry as it is now.
            self._holder.refresh()

    def send_ready(self, batch: DataFrame, _batch_id: int) -> None:
        """The batching query's ``foreachBatch``: send the batches that are due."""
        live = self._holder.current()
        started = time.perf_counter()
        summary = send(batch, self.sender(live), self._settings.delivery.send_partitions)
        summary.phase_seconds["send_ready_batches"] += time.perf_counter() - started
        summary.registry_version = live.version
        self.record(summary)

    def batching(self, spark: SparkSession, checkpoint: Path, *, available_now: bool = False,
                 ) -> Callable[[], StreamingQuery]:
        """What starts the batching query on ``checkpoint``, sending with this step."""
        return lambda: start_batching(
            spark, self._settings, concise_failures("wayline-delivery-batching", self.send_ready), str(checkpoint),
            available_now=available_now,
        )


def live_snapshots(spark: SparkSession, settings: Settings, database: Database,
                   endpoints: EndpointService, checkpoint: Path) -> SnapshotHolder[LiveSnapshot]:
    """The registry snapshot as the delivery job's queries hold it, swapped when the
    version moved (read at most every ``delivery.version_poll_s``), its routing table
    published under the job's ``checkpoint`` folder: where a cluster's executors see it too."""
    return SnapshotHolder(
        load=lambda: load_live_snapshot(spark, database, endpoints, checkpoint / "routing"),
        version=database.current_version,
        poll_s=settings.delivery.version_poll_s,
        retire=lambda live: live.targets.unpersist(),
    )


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
    root = checkpoint or settings.checkpoint_root / "delivery"
    holder = live_snapshots(spark, settings, database, endpoints, root)
    holder.current()
    ensure_delivery_topics(settings)
    step = SendStep(settings, database, holder, metrics)
    # The matching query's id names the run its bundles come from; it is known once start() returns.
    matching_id: list[str] = []
    started = threading.Event()

    def match_and_send(batch: DataFrame, batch_id: int) -> None:
        started.wait()
        live = holder.current()
        if live.has_batch:
            job.ensure_batching()
        step.record(deliver_micro_batch(batch, Source(matching_id[0], batch_id), live, settings, step.sender(live)))

    writer = (
        read_kafka(spark, settings, delivered_topic_pattern(settings),
                   max_offsets_per_trigger=settings.delivery.max_offsets_per_trigger)
        .writeStream.queryName("wayline-delivery")
        .option("checkpointLocation", str(root / "matching"))
        .foreachBatch(concise_failures("wayline-delivery", match_and_send))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{round(settings.delivery.trigger_interval_s * 1000)} milliseconds")
    job = DeliveryJob(writer.start(), step.batching(spark, root / "batching", available_now=available_now), holder)
    # Leftovers of an earlier run (in its state or on the topic) are delivered even if no
    # subscription is in batch mode any more.
    if holder.current().has_batch or (root / "batching").exists():
        job.ensure_batching()
    matching_id.append(job.matching.id)
    started.set()
    return job


__all__ = [
    "DELIVERY_CALLER",
    "GONE_REASON",
    "DeliveryJob",
    "SendStep",
    "deliver_micro_batch",
    "disable_gone",
    "ensure_delivery_topics",
    "live_snapshots",
    "start_delivery",
]
