"""`wayline run delivery` with ``delivery.engine = "senders"``: the Spark side, matching only.

The *matching query* runs in the JVM only: every event topic → parse
(:mod:`~wayline.pipelines.envelope`) → match (:mod:`~wayline.pipelines.matching`, the
snapshot's match table and compiled filters) → one Kafka sink whose rows name their own
topic (:func:`~wayline.pipelines.routing.work_records`): requests to
``delivery.work_topic`` for the sender processes (:mod:`wayline.delivery.work`),
and batch-mode pairs, which the sender processes gather into batches in memory
(:mod:`wayline.delivery.open_batches`), quarantine copies and self-audit records. One
stage, no shuffle, no Python. Its trigger follows the topics it reads
(:func:`chosen_trigger`): Spark's real-time trigger where the cores cover the source
partitions, otherwise back-to-back micro-batches coalesced to the cores. Where they do not
(``delivery.intake``, :func:`resolved`), intake processes copy the source topics onto the
intake topic's few partitions (:mod:`wayline.delivery.runtime.intake`), and the query
reads that instead, under the real-time trigger, each record put back as read from its
own topic (:func:`~wayline.pipelines.intake_source.from_origin`).

The plan does not hold the registry: ``wayline_routes`` (:mod:`~wayline.pipelines.matching`)
routes with the table the job publishes under its checkpoint folder for each registry
version (read every ``delivery.version_poll_s``, :mod:`wayline.delivery.routing_table`), and
the running tasks pick a new one up within a second. So the query runs on, never restarted
for a registry change, and a real-time batch may last ``realtime_checkpoint_s`` (minutes):
each batch's end and start is a pause of a second or more in every partition's stream.

Start it from ``wayline run delivery`` as :func:`wayline.compose.matching_job`, on a
SparkSession made from :func:`with_enough_slots` settings.

The *batching query* (:mod:`~wayline.pipelines.batching`, the micro-batch engine's)
runs beside it only to drain what an earlier version of this engine left on the batch
topic or in its state (a checkpoint's ``batching`` folder): this engine writes nothing
there any more.

Slots: a real-time query holds one task slot per source partition for its whole
checkpoint interval, so the Spark master needs at least that many plus what, in the same
application, the recon job runs: see :func:`slots_needed`.

Filtered events write nothing; they are counted by the query's observed metrics
(:data:`OBSERVED`: ``events``, ``filtered``, ``quarantined`` and per reason), reported in
its progress at the end of each batch, which the job adds to the delivery metrics
(``wayline_events``, ``wayline_events_filtered``, ``wayline_records_quarantined``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from wayline.core.envelope import Reason
from wayline.core.errors import ConfigError, RetryLater
from wayline.core.kafka import topic_partitions
from wayline.core.settings import Settings, Trigger
from wayline.core.topics import matched_topic_pattern
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.intake import ensure_intake_topic, uses_intake
from wayline.pipelines.delivery import SendStep, ensure_delivery_topics, live_snapshots
from wayline.pipelines.intake_source import from_origin
from wayline.pipelines.job import RestartingQuery
from wayline.pipelines.matching import routing
from wayline.pipelines.routing import routed, units, work_records
from wayline.pipelines.source import read_kafka
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService

_log = logging.getLogger(__name__)

QUERY_NAME = "wayline-matching"
OBSERVED = "wayline-matching"
"""The name of the matching query's observed metrics in its progress."""
READING_POLL_S = 0.5
"""How often :meth:`MatchingJob.wait_until_reading` looks."""


def slots_needed(source_partitions: int, settings: Settings, *, beside: int = 0) -> int:
    """Task slots the senders engine's queries need at once: the real-time matching
    query's one per source partition and a spare for the small jobs it runs beside them
    (one in all with micro-batches, which take turns), and one stage's tasks each for the
    ``beside`` other queries sharing the Spark application (the recon job)."""
    matching = source_partitions + 1 if settings.delivery.matching_trigger == "realtime" else 1
    return matching + settings.spark.shuffle_partitions * beside


def source_partitions(settings: Settings) -> int:
    """Partitions of the topics the matching query reads now: the intake topic's with
    ``delivery.intake = "on"`` (made just before: waited for, where counting the topics
    that matched once found none on 500 source topics, and the default count chose
    micro-batches for the intake topic), otherwise the source topics' (a topic created
    later adds its own at the query's next batch); with none yet,
    ``kafka.topic_partitions``, the first one's."""
    if settings.delivery.intake == "on":
        return topic_partitions(settings.kafka_bootstrap(), settings.delivery.intake_topic)
    return _partitions(settings, matched_topic_pattern(settings))


def _partitions(settings: Settings, pattern: str) -> int:
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap()})
    try:
        topics = admin.list_topics(timeout=10).topics
    except KafkaException as exc:
        raise RetryLater(f"Kafka at {settings.kafka_bootstrap()} did not answer: {exc}") from exc
    matching = re.compile(pattern)
    found = sum(len(meta.partitions) for name, meta in topics.items() if matching.match(name))
    return found or settings.kafka.topic_partitions


def cores_for(master: str, slots: int) -> int:
    """The cores ``slots`` task slots of ``master`` really run on: a local master's slots
    share this machine's CPUs (``local[40]`` on 2 cores is 40 tasks on 2 cores)."""
    return min(slots, os.cpu_count() or 1) if master.startswith("local") else slots


def chosen_trigger(settings: Settings, partitions: int, cores: int) -> Trigger:
    """The matching query's trigger: ``delivery.matching_trigger``, or for ``auto`` the
    real-time trigger only where ``cores`` hold a busy task per source partition and one
    more for everything else; otherwise micro-batches coalesced to the cores, which read
    any number of partitions with as many tasks as there are cores (docs/decisions.md,
    "The matching trigger follows the topics")."""
    asked = settings.delivery.matching_trigger
    if asked != "auto":
        return asked
    return "realtime" if partitions + 1 <= cores else "micro_batch"


def with_trigger(settings: Settings, trigger: Trigger) -> Settings:
    return settings.model_copy(update={"delivery": settings.delivery.model_copy(update={"matching_trigger": trigger})})


def resolved(settings: Settings, cores: int) -> Settings:
    """``settings`` with ``delivery.intake`` and ``delivery.matching_trigger`` decided for
    ``cores`` (:func:`~wayline.delivery.runtime.intake.uses_intake`, :func:`chosen_trigger`)
    from the source topics present now, the intake topic made when it is used: with the
    intake, the query reads the intake topic's few partitions, under the real-time
    trigger by construction."""
    intake = uses_intake(settings, source_partitions(with_intake(settings, on=False)), cores)
    settings = with_intake(settings, on=intake)
    if intake:
        ensure_intake_topic(settings, cores)
    return with_trigger(settings, chosen_trigger(settings, source_partitions(settings), cores))


def with_intake(settings: Settings, *, on: bool) -> Settings:
    return settings.model_copy(update={"delivery": settings.delivery.model_copy(update={"intake": "on" if on else "off"})})


def with_matching_jvm(settings: Settings) -> Settings:
    """``settings`` for the SparkSession of ``wayline run delivery`` with ``delivery.engine =
    "senders"``: ``delivery.matching_java_options`` after ``spark.java_options``, and
    ``delivery.matching_driver_memory`` for its heap. Its JVM runs the matching query alone,
    a projection per event: C2's compilations cost more CPU than they save in the minutes
    after start (docs/benchmarks.md, "Delivery on three topic layouts (issue 25)"), and a
    heap of every job's size is mostly young garbage G1 keeps (docs/benchmarks.md,
    "Delivery's resident memory (issue 25)")."""
    options = f"{settings.spark.java_options} {settings.delivery.matching_java_options}".strip()
    spark = settings.spark.model_copy(update={"java_options": options,
                                              "driver_memory": settings.delivery.matching_driver_memory})
    return settings.model_copy(update={"spark": spark})


def with_enough_slots(settings: Settings, *, beside: int = 0) -> Settings:
    """``settings`` for the SparkSession of ``wayline run delivery`` with ``delivery.engine =
    "senders"`` on a local master (``local[N]``): the intake and the matching trigger
    decided (:func:`resolved`, from the partitions the job will read, its own topics made
    first), and for the real-time trigger the master raised to :func:`slots_needed`. A
    cluster master is left alone: its cores are the operator's to size, and both are
    decided once the job knows them (:class:`MatchingJob`)."""
    local = re.fullmatch(r"local\[(\d+|\*)\]", settings.spark.master)
    if settings.delivery.engine != "senders" or local is None:
        return settings
    if settings.delivery.matching_trigger == "micro_batch" and settings.delivery.intake != "auto":
        return settings
    ensure_delivery_topics(settings)
    slots = (os.cpu_count() or 1) if local[1] == "*" else int(local[1])
    settings = resolved(settings, cores_for("local", slots))
    if settings.delivery.matching_trigger != "realtime":
        return settings
    slots = max(slots, slots_needed(source_partitions(settings), settings, beside=beside))
    return settings.model_copy(update={"spark": settings.spark.model_copy(update={"master": f"local[{slots}]"})})


def check_slots(spark: SparkSession, settings: Settings) -> None:
    """Refuse to start a real-time matching query that could not get a slot per source
    partition and leave one for the other queries: Spark would fail it with
    ``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT`` (or the other queries would starve)."""
    if settings.delivery.matching_trigger != "realtime":
        return
    partitions, slots = source_partitions(settings), spark.sparkContext.defaultParallelism
    if partitions + 1 > slots:
        raise ConfigError(
            f"the real-time matching query reads {partitions} Kafka partitions and holds a task slot for each, "
            f"but Spark has {slots}: set spark.master to local[{slots_needed(partitions, settings)}] (or "
            "give the cluster that many cores), or set delivery.matching_trigger = \"auto\" (micro-batches where "
            "the cores do not cover the partitions)"
        )


def matching_records(source: DataFrame, routing_folder: Path, settings: Settings, *, real_time: bool) -> DataFrame:
    """The matching query's plan over ``source`` (the Kafka source's columns): each record
    parsed and routed with the table ``routing_folder``'s ``CURRENT`` names, counted
    (:data:`OBSERVED`), and turned into the Kafka records it makes
    (:func:`~wayline.pipelines.routing.work_records`)."""
    # Counted per record, before its units are made: one row per record rather than per
    # unit (a pair and its audit record are two), and the fewest tests on each.
    valid = F.col("reason").isNull()
    matched = routed(source, routing(routing_folder), settings, real_time=real_time).observe(
        OBSERVED,
        F.count_if(valid).alias("events"),
        F.count_if(valid & (F.size("subscriptions") == 0)).alias("filtered"),
        F.count_if(~valid).alias("quarantined"),
        *(F.count_if(F.col("reason") == F.lit(reason.value)).alias(f"quarantined_{reason.value}") for reason in Reason),
    )
    # A filtered event writes nothing: it makes no units at all, rather than a `filtered` one
    # that work_records drops.
    writes = matched.where(~valid | (F.size("subscriptions") > 0))
    return work_records(units(writes, settings), settings)


def start_matching_query(spark: SparkSession, settings: Settings, routing_folder: Path, checkpoint: Path,
                         ) -> StreamingQuery:
    """Start the matching query, routing with the table ``routing_folder``'s ``CURRENT``
    names at the time (its version goes into every request's headers)."""
    delivery = settings.delivery
    realtime = delivery.matching_trigger == "realtime"
    intake = delivery.intake == "on"
    source = read_kafka(spark, settings, matched_topic_pattern(settings),
                        max_offsets_per_trigger=delivery.max_offsets_per_trigger, real_time=realtime)
    if intake:
        source = from_origin(source)
    if not realtime:
        # One task per core, not one per Kafka partition (dozens with a topic per event
        # type): a narrow coalesce, no shuffle. The real-time trigger refuses it: there each
        # partition is a long-running task of its own (see `slots_needed`).
        source = source.coalesce(spark.sparkContext.defaultParallelism)
    writer = (
        matching_records(source, routing_folder, settings, real_time=realtime)
        .writeStream.format("kafka").queryName(QUERY_NAME)
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
        .option("kafka.linger.ms", settings.kafka.stream_linger_ms)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
    )
    if realtime:
        return writer.trigger(realTime=f"{delivery.realtime_checkpoint_s:g} seconds").start()
    return writer.trigger(processingTime=f"{round(delivery.trigger_interval_s * 1000)} milliseconds").start()


def counted(observed: Row) -> BatchSummary:
    """A batch's :data:`OBSERVED` metrics as the delivery metrics count them."""
    seen = observed.asDict()
    return BatchSummary(events=seen["events"], filtered=seen["filtered"], batches=1, quarantined=Counter({
        reason.value: seen[f"quarantined_{reason.value}"] for reason in Reason if seen[f"quarantined_{reason.value}"]}))


class MatchingJob:
    """The matching query, and the registry's versions published for it as they come (and the
    batching query while it drains an earlier version's leftovers): run as one
    :class:`~wayline.pipelines.job.Job`."""

    def __init__(self, spark: SparkSession, settings: Settings, database: Database, endpoints: EndpointService,
                 metrics: DeliveryMetrics, checkpoint: Path) -> None:
        self._spark = spark
        ensure_delivery_topics(settings)
        if "auto" in (settings.delivery.matching_trigger, settings.delivery.intake):
            settings = resolved(settings, cores_for(spark.sparkContext.master, spark.sparkContext.defaultParallelism))
        self.settings = settings
        """What the job runs with: the intake and the trigger decided."""
        self._database = database
        self._metrics = metrics
        self._counted_batch = -1
        self._counting = threading.Lock()  # the version poller and stop() both count
        self._holder = live_snapshots(spark, settings, database, endpoints, checkpoint)
        self._root = checkpoint
        self._start_batching = SendStep(settings, database, self._holder, metrics).batching(spark, checkpoint / "batching")
        # Never asked to restart: its failures and its stop read as every other job's.
        self.matching = RestartingQuery(QUERY_NAME, self._start_matching)
        self.batching: StreamingQuery | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._batching_failure: BaseException | None = None
        self._poll_failure: Exception | None = None
        self._poller = threading.Thread(target=self._poll_version, name=f"{QUERY_NAME}-version", daemon=True)

    def start(self) -> MatchingJob:
        """Start the queries. The first snapshot is loaded first, so a registry that
        cannot be read is an error here rather than in a query thread."""
        self._holder.current()
        check_slots(self._spark, self.settings)
        delivery = self.settings.delivery
        _log.info("matching query trigger: %s, reading %s", delivery.matching_trigger,
                  f"the intake topic {delivery.intake_topic}" if delivery.intake == "on" else "the source topics")
        self.matching.begin()
        # Leftovers of an earlier run (in its state or on the topic) are sent even if no
        # subscription is in batch mode any more.
        if (self._root / "batching").exists():
            self.ensure_batching()
        self._poller.start()
        return self

    def wait_until_reading(self, timeout_s: float) -> bool:
        """Wait until the matching query reads: a task of its running batch is at work (the
        real-time trigger's one long batch), or it has finished a batch. Its first plan takes
        seconds on a cold JVM, and what is sent meanwhile waits for it. Whether it reads
        within ``timeout_s`` (False, too, when it stopped)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.isActive:
            query = self.matching.query
            if query is not None and (query.lastProgress is not None or self._tasks_at_work(str(query.runId))):
                return True
            time.sleep(READING_POLL_S)
        return False

    def _tasks_at_work(self, run_id: str) -> bool:
        """Whether a running job of the query's run (Spark names its jobs' group after the run
        id) has a task at work."""
        tracker = self._spark.sparkContext.statusTracker()
        for job_id in tracker.getJobIdsForGroup(run_id):
            job = tracker.getJobInfo(job_id)
            if job is None or job.status != "RUNNING":
                continue
            if any((stage := tracker.getStageInfo(stage_id)) is not None and stage.numActiveTasks > 0
                   for stage_id in job.stageIds):
                return True
        return False

    @property
    def registry_version(self) -> int:
        """The registry version published for the matching query, which its tasks route with
        within a second."""
        return self._holder.current().version

    def _start_matching(self) -> StreamingQuery:
        # Apart from the source topics' checkpoint: its offsets are of other topics.
        folder = "senders-intake" if self.settings.delivery.intake == "on" else "senders-matching"
        return start_matching_query(self._spark, self.settings, self._holder.current().folder, self._root / folder)

    def _poll_version(self) -> None:
        try:
            self._follow_versions()
        except Exception as exc:  # noqa: BLE001 - surfaced by exception(): a job that stopped following the registry has failed
            self._poll_failure = exc

    def _follow_versions(self) -> None:
        while not self._stopped.wait(self.settings.delivery.version_poll_s):
            self._count_batches()
            # Reading the version publishes a new one's routing table (a registry the holder
            # cannot read keeps the table it has).
            self._holder.current()

    def _count_batches(self) -> None:
        """Add the batches that ended since the last look to the delivery metrics, each once
        (one replayed after a restart on the checkpoint is not counted again)."""
        query = self.matching.query
        with self._counting:
            for progress in query.recentProgress if query is not None else []:
                observed = progress.observedMetrics.get(OBSERVED)
                if progress.batchId > self._counted_batch and observed is not None:
                    self._metrics.add(counted(observed))
                    self._counted_batch = progress.batchId

    def ensure_batching(self) -> None:
        """Start the batching query unless it runs."""
        with self._lock:
            if self.batching is None and not self._stopped.is_set():
                self.batching = self._start_batching()

    @property
    def queries(self) -> list[StreamingQuery]:
        """The queries running now (the matching query's current incarnation first)."""
        with self._lock:
            running = [query for query in (self.matching.query, self.batching) if query is not None]
        return running

    @property
    def isActive(self) -> bool:  # noqa: N802 - reads like StreamingQuery's
        return self._poll_failure is None and self.matching.isActive and (
            self.batching is None or self.batching.isActive)

    def exception(self) -> BaseException | None:
        failure = self._poll_failure or self.matching.exception()
        if failure is None and self.batching is not None:
            # A stop interrupts the batching query's micro-batch (or its Python runner
            # starting): replayed from the checkpoint, so only a failure before it counts.
            failure = self._batching_failure if self._stopped.is_set() else self.batching.exception()
        return failure

    def stop(self) -> None:
        with self._lock:
            batching = self.batching
            self._batching_failure = batching.exception() if batching is not None else None
            self._stopped.set()
        self.matching.stop()
        self._count_batches()
        if batching is not None:
            batching.stop()


__all__ = [
    "OBSERVED", "QUERY_NAME", "MatchingJob", "check_slots", "chosen_trigger", "cores_for", "counted", "matching_records",
    "resolved", "slots_needed", "source_partitions", "start_matching_query", "with_enough_slots", "with_intake",
    "with_matching_jvm", "with_trigger",
]
