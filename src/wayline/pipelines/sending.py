"""The send step both delivery queries share: work rows → signed requests and Kafka records → counts.

A frame of work rows — the columns of :data:`WORK_SCHEMA`, as
:mod:`~wayline.pipelines.routing` makes them (the batching query's ready batches have
the first five only) — goes through ``mapInArrow``: each task does the send step
(:func:`~wayline.delivery.runtime.send_step.send_work`, which the sender processes run too, on
the rows read by :func:`~wayline.delivery.runtime.work_rows.work_of`): one
delivery stage (:func:`~wayline.delivery.stage.run_stage`: dispatcher, stage deadline,
the delivery log and retry store written by the task itself) for its ``single`` and
``batch`` rows, its ``record`` rows (quarantine copies, batch-mode bundles) written to
Kafka and acknowledged, and everything counted. It returns one row: its
:class:`~wayline.delivery.outcomes.BatchSummary`. The transport, database pool and
producer are the Python worker's (:mod:`~wayline.delivery.runtime.worker`), kept across
micro-batches.

Why the tasks write the log, the retry store and the records themselves: the retry
store keeps each undelivered payload, which would otherwise travel to the driver and be
written by one process; and a separate Kafka write would be a second Spark job.
Outcomes and records are written before the micro-batch commits, so a replay finds them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pydantic import SecretStr
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from wayline.core.settings import DeliverySettings, KafkaSettings, PostgresSettings, RegistrySettings, Settings
from wayline.delivery.outcomes import BatchSummary, Outcome
from wayline.delivery.runtime.send_step import send_work
from wayline.delivery.runtime.work_rows import SEND_COLUMNS, WORK_ARROW_SCHEMA, work_of
from wayline.delivery.runtime.worker import worker_pool
from wayline.delivery.stage import StageSettings
from wayline.delivery.targets import Target

_WORK_FIELDS = from_arrow_schema(WORK_ARROW_SCHEMA).fields
WORK_SCHEMA = ", ".join(f"{field.name} {field.dataType.simpleString()}" for field in _WORK_FIELDS)
""":data:`~wayline.delivery.runtime.work_rows.WORK_ARROW_SCHEMA` (a row of work, by kind) as Spark DDL."""
SEND_SCHEMA = ", ".join(f"{field.name} {field.dataType.simpleString()}" for field in _WORK_FIELDS[:SEND_COLUMNS])
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
        summary = send_work(work_of(batches), self._targets.value, self._settings, self._stage,
                            lambda: worker_pool(self._settings), failing=self._failing)
        if summary is not None:
            yield pa.RecordBatch.from_pylist([{"summary": summary.to_json()}], schema=SUMMARY_SCHEMA)


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
    return frame.select(*(F.col(field.name) if field.name in have else F.lit(None).cast(field.dataType).alias(field.name)
                          for field in _WORK_FIELDS))


def send(work: DataFrame, sender: PartitionSender, partitions: int | None = None) -> BatchSummary:
    """Do the work ``work`` holds (see :data:`WORK_SCHEMA`); what happened, in counts.
    With ``partitions``, repartition by endpoint first (so one endpoint's in-flight and
    rate limits hold in one task); without, ``work`` is partitioned already."""
    # Adaptive execution runs every shuffle and broadcast of the plan as a Spark job of its
    # own (see docs/benchmarks.md#delivery-job-issue-4--2026-11-23); this plan's partitioning is fixed, so it gains
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
]
