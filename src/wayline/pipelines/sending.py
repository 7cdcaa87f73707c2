"""The send step both delivery queries share: work rows → signed requests and Kafka records → counts.

A frame of work rows — the columns of :data:`WORK_SCHEMA`, as
:mod:`~wayline.pipelines.routing` makes them (the batching query's ready batches have
the first five only) — goes through ``mapInArrow``: each task runs one delivery stage
(:func:`~wayline.delivery.stage.run_stage`: dispatcher, stage deadline, the delivery log
and retry store written by the task itself) for its ``single`` and ``batch`` rows,
writes its ``record`` rows (quarantine copies, batch-mode bundles) to Kafka and waits for
the broker's acknowledgement, and counts everything. It returns one row: its
:class:`~wayline.delivery.outcomes.BatchSummary`. The transport, database pool and
producer are the Python worker's (:mod:`~wayline.pipelines.worker`), kept across
micro-batches.

Why the tasks write the log, the retry store and the records themselves: the retry
store keeps each undelivered payload, which would otherwise travel to the driver and be
written by one process; and a separate Kafka write would be a second Spark job.
Outcomes and records are written before the micro-batch commits, so a replay finds them.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from wayline.core.kafka import KafkaRecord, produce_all
from wayline.core.settings import DeliverySettings, KafkaSettings, PostgresSettings, RegistrySettings, Settings
from wayline.delivery import audit
from wayline.delivery.attempt import Kind, Pending, State
from wayline.delivery.outcomes import BatchSummary, Outcome
from wayline.delivery.stage import Blocked, DeliveryStore, StageSettings, run_stage
from wayline.delivery.targets import Target
from wayline.pipelines.worker import WorkerPool, worker_pool

_SEND_FIELDS = (
    ("kind", "string"), ("subscription_id", "string"), ("endpoint_id", "string"), ("event_ids", "array<string>"),
    ("body", "binary"),
)
_WORK_FIELDS = (
    *_SEND_FIELDS, ("topic", "string"), ("key", "binary"), ("headers", "array<struct<key:string,value:binary>>"),
    ("reason", "string"), ("events", "int"), ("source", "string"),
)
SEND_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _SEND_FIELDS)
WORK_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _WORK_FIELDS)
"""A row of work for a sending task, by ``kind``: ``single`` or ``batch`` (a request:
``body`` to ``endpoint_id``), ``record`` (``body`` as the value of a Kafka record for
``topic``: a quarantine copy with its ``reason``, or a batch-mode bundle), ``audit`` (a
self-audit record, written like a record but not counted), ``filtered`` (a valid event
no subscription wanted). ``events``: the valid events the row accounts for; ``source``:
a single request's Kafka topic, for its audit outcome."""
SUMMARY_SCHEMA = pa.schema([("summary", pa.binary())])
# The rows of `Tally.rows()`, as each draining task returns them. Arrow is the source of
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
_REQUESTS = pa.array(["single", "batch"])
_RECORDS = pa.array(["record", "audit"])


class PartitionSender:
    """The ``mapInArrow`` step: one task's work rows → one delivery stage and its Kafka
    records → one summary row.

    Holds only picklable values (``settings`` as :func:`task_settings` makes them); what
    it connects with comes from the worker's pool.
    """

    def __init__(self, targets: Broadcast[dict[str, Target]], settings: Settings, stage: StageSettings,
                 failing: frozenset[str] = frozenset()) -> None:
        self._targets = targets
        self._settings = settings
        self._stage = stage
        self._failing = failing

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        now = datetime.now(timezone.utc)
        summary = BatchSummary()
        pendings: list[Pending] = []
        topics: dict[str, str] = {}
        records: list[KafkaRecord] = []
        for batch in batches:
            pendings += _pendings(batch, now, topics)
            records += _count_records(batch, summary)
        if not (pendings or records or summary.events):
            return
        pool = worker_pool(self._settings)
        started = time.perf_counter()
        if records:
            # Acknowledged before the stage: a quarantine copy, bundle or consumed-audit
            # record is never lost to a failed send.
            produce_all(pool.producer, records)
            summary.phase_seconds["records"] += time.perf_counter() - started
        if pendings:
            started = time.perf_counter()
            store = _Keeping(pool.store)
            summary.deliveries = run_stage(pendings, self._targets.value, store, pool.transport, self._stage,
                                           failing=self._failing, run=pool.run)
            write_outcomes(pool, self._settings, store.states, topics, self._settings.delivery.batch_topic)
            summary.phase_seconds["send"] += time.perf_counter() - started
        yield pa.RecordBatch.from_pylist([{"summary": summary.to_json()}], schema=SUMMARY_SCHEMA)


class _Keeping:
    """The worker's store, keeping what the stage settled for the self-audit's outcomes."""

    def __init__(self, store: DeliveryStore) -> None:
        self._store = store
        self.states: list[State] = []

    def settled(self, webhook_ids: Collection[str]) -> set[str]:
        return self._store.settled(webhook_ids)

    def blocked(self, subscription_ids: Collection[str], endpoint_ids: Collection[str]) -> Blocked:
        return self._store.blocked(subscription_ids, endpoint_ids)

    def record(self, states: Sequence[State]) -> None:
        self._store.record(states)
        self.states.extend(states)


def write_outcomes(pool: WorkerPool, settings: Settings, states: Sequence[State], topics: Mapping[str, str],
                   otherwise: str) -> None:
    """The self-audit's outcome records of the final ``states``, acknowledged (with ``audit.enabled``)."""
    if settings.audit.enabled:
        outcomes = audit.outcome_events(states, topics, otherwise, datetime.now(timezone.utc))
        produce_all(pool.producer, (KafkaRecord(settings.audit.outcomes_topic, key, value) for key, value in outcomes))


def _pendings(batch: pa.RecordBatch, now: datetime, topics: dict[str, str]) -> list[Pending]:
    """``batch``'s requests; each single event's Kafka topic goes to ``topics``."""
    # The HTTP edge: per-row Python is where the rows become signed requests anyway.
    requests = batch.filter(pc.is_in(batch.column("kind"), _REQUESTS))
    pendings = []
    for row in requests.select(["kind", "subscription_id", "endpoint_id", "event_ids", "body", "source"]).to_pylist():
        pendings.append(Pending.first(Kind(row["kind"]), row["event_ids"], row["body"],
                                      subscription_id=row["subscription_id"], endpoint_id=row["endpoint_id"], now=now))
        if row["source"] is not None:
            topics[row["event_ids"][0]] = row["source"]
    return pendings


def _count_records(batch: pa.RecordBatch, summary: BatchSummary) -> list[KafkaRecord]:
    """Add ``batch``'s counts to ``summary``; its Kafka records to write."""
    kinds = batch.column("kind")
    summary.events += pc.sum(batch.column("events")).as_py() or 0
    summary.filtered += pc.sum(pc.equal(kinds, "filtered")).as_py() or 0
    records = batch.filter(pc.is_in(kinds, _RECORDS))
    written = []
    for row in records.select(["kind", "topic", "key", "body", "headers", "reason", "event_ids"]).to_pylist():
        if row["reason"] is not None:
            summary.quarantined[row["reason"]] += 1
        elif row["kind"] == "record":  # a bundle: its events wait for their batch
            summary.held += len(row["event_ids"])
        written.append(KafkaRecord(row["topic"], row["key"], row["body"],
                                   [(h["key"], h["value"]) for h in row["headers"] or ()]))
    return written


def task_settings(settings: Settings) -> Settings:
    """What the sending tasks get of the settings: the database and broker addresses,
    resolved here on the driver (executors have no local stack file), the URL allow-list
    their transports enforce at connect time, which HTTP client sends, and where the
    self-audit goes; nothing else — no encryption keys."""
    return Settings.model_construct(
        postgres=PostgresSettings(dsn=SecretStr(settings.postgres_dsn())),
        kafka=KafkaSettings(bootstrap_servers=settings.kafka_bootstrap()),
        registry=RegistrySettings(url_allow_list=settings.registry.url_allow_list),
        delivery=DeliverySettings(http_client=settings.delivery.http_client, batch_topic=settings.delivery.batch_topic),
        audit=settings.audit,
    )


def as_work(frame: DataFrame) -> DataFrame:
    """``frame`` with every column of :data:`WORK_SCHEMA`, those it lacks as NULL."""
    have = set(frame.columns)
    return frame.select(*(F.col(name) if name in have else F.lit(None).cast(kind).alias(name)
                          for name, kind in _WORK_FIELDS))


def send(work: DataFrame, sender: PartitionSender, partitions: int | None = None) -> BatchSummary:
    """Do the work ``work`` holds (see :data:`WORK_SCHEMA`); what happened, in counts.
    With ``partitions``, repartition by endpoint first (so one endpoint's in-flight and
    rate limits hold in one task); without, ``work`` is partitioned already."""
    # Adaptive execution runs every shuffle and broadcast of the plan as a Spark job of its
    # own (six per micro-batch, measured); this plan's partitioning is fixed, so it gains
    # nothing. The setting holds for this query's session only (a streaming query's
    # micro-batches run in a clone of the job's session).
    work.sparkSession.conf.set("spark.sql.adaptive.enabled", "false")
    if partitions is not None:
        work = work.repartition(partitions, "endpoint_id")
    done = as_work(work).mapInArrow(sender, from_arrow_schema(SUMMARY_SCHEMA))
    summary = BatchSummary()
    for row in done.collect():
        summary.merge(BatchSummary.from_json(row["summary"]))
    return summary


__all__ = [
    "SEND_SCHEMA", "SUMMARY_SCHEMA", "TALLY_SCHEMA", "WORK_SCHEMA", "PartitionSender", "as_work", "send", "task_settings",
    "write_outcomes",
]
