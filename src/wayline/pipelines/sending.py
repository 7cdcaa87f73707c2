"""The send step both delivery queries share: rows of deliveries → signed requests → counts.

A frame of deliveries — one row per request to make, single events and batches alike,
with the columns of :data:`SEND_SCHEMA` — is repartitioned by endpoint (so one
endpoint's in-flight and rate limits hold in one task), then ``mapInArrow`` runs one
delivery stage per task (:func:`~wayline.delivery.stage.run_stage`: one aiohttp
transport and dispatcher, the stage deadline, the delivery log and retry store written
by the task itself). The driver receives only a few count rows per (endpoint,
subscription).

Why the tasks write the log and the retry store themselves: the retry store keeps each
undelivered payload, which would otherwise travel to the driver and be written by one
process. Outcomes are written before the micro-batch commits, so a replay finds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pyarrow as pa
from pydantic import SecretStr
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from wayline.core.settings import DeliverySettings, PostgresSettings, RegistrySettings, Settings
from wayline.delivery.attempt import Kind, Pending
from wayline.delivery.http_client import transport_for
from wayline.delivery.outcomes import Outcome, Tally
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.storage.store import PostgresDeliveryStore
from wayline.delivery.targets import Target
from wayline.registry.db import make_engine

SEND_SCHEMA = "kind string, subscription_id string, endpoint_id string, event_ids array<string>, body binary"
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


class PartitionSender:
    """The ``mapInArrow`` step: one task's deliveries → one delivery stage → its tally rows.

    Holds only picklable values (``settings`` as :func:`task_settings` makes them); the
    transport, the dispatcher and the database engine are made inside the task and closed
    before it ends.
    """

    def __init__(self, targets: Broadcast[dict[str, Target]], settings: Settings, stage: StageSettings,
                 failing: frozenset[str] = frozenset()) -> None:
        self._targets = targets
        self._settings = settings
        self._stage = stage
        self._failing = failing

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        now = datetime.now(timezone.utc)
        # The HTTP edge: per-row Python is where the rows become signed requests anyway.
        pendings = [
            Pending.first(Kind(row["kind"]), row["event_ids"], row["body"], subscription_id=row["subscription_id"],
                          endpoint_id=row["endpoint_id"], now=now)
            for batch in batches
            for row in batch.to_pylist()
        ]
        if not pendings:
            return
        engine = make_engine(self._settings.postgres_dsn())
        try:
            tally = run_stage(
                pendings, self._targets.value, PostgresDeliveryStore(engine),
                transport_for(self._settings.registry.url_allow_list, self._settings.delivery.http_client), self._stage,
                failing=self._failing,
            )
        finally:
            engine.dispose()
        yield pa.RecordBatch.from_pylist(tally.rows(), schema=TALLY_SCHEMA)


def task_settings(settings: Settings) -> Settings:
    """What the sending tasks get of the settings: the database address, resolved here on
    the driver (executors have no local stack file), the URL allow-list their transports
    enforce at connect time, and which HTTP client sends; nothing else — no encryption keys."""
    return Settings.model_construct(
        postgres=PostgresSettings(dsn=SecretStr(settings.postgres_dsn())),
        registry=RegistrySettings(url_allow_list=settings.registry.url_allow_list),
        delivery=DeliverySettings(http_client=settings.delivery.http_client),
    )


def send(deliveries: DataFrame, sender: PartitionSender, partitions: int) -> Tally:
    """Make every request ``deliveries`` holds (columns of :data:`SEND_SCHEMA`); what happened, in counts."""
    sent = deliveries.repartition(partitions, "endpoint_id").mapInArrow(sender, from_arrow_schema(TALLY_SCHEMA))
    return Tally.from_rows(row.asDict() for row in sent.collect())


__all__ = ["SEND_SCHEMA", "TALLY_SCHEMA", "PartitionSender", "send", "task_settings"]
