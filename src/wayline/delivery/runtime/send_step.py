"""The send step without Spark: a batch of work rows → one delivery stage and its Kafka records → counts.

Both senders run it: a Spark sending task (:class:`~wayline.pipelines.sending.PartitionSender`,
inside ``mapInArrow``) and a sender process (:mod:`~wayline.delivery.runtime.senders`, on the
records it consumed from the work topic). One stage
(:func:`~wayline.delivery.stage.run_stage`: dispatcher, stage deadline, straggler cut and
slow marks, the delivery log and retry store) for the ``single`` and ``batch`` rows; the
``record`` and ``audit`` rows written to Kafka and acknowledged before it; the self-audit's
outcomes of what the stage settled acknowledged after it. Nothing here imports Spark, so a
sender process never loads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from wayline.core.kafka import KafkaRecord, produce_all
from wayline.core.settings import Settings
from wayline.delivery import audit
from wayline.delivery.attempt import Kind, Pending, State
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.worker import WorkerPool
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.targets import Target

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
WORK_ARROW_SCHEMA = pa.schema([
    ("kind", pa.string()), ("subscription_id", pa.string()), ("endpoint_id", pa.string()),
    ("event_ids", pa.list_(pa.string())), ("body", pa.binary()), ("topic", pa.string()), ("key", pa.binary()),
    ("headers", pa.list_(_HEADER)), ("reason", pa.string()), ("events", pa.int32()), ("source", pa.string()),
])
"""A row of work, by ``kind``: ``single`` or ``batch`` (a request: ``body`` to
``endpoint_id``), ``record`` (``body`` as the value of a Kafka record for ``topic``: a
quarantine copy with its ``reason``, or a batch-mode bundle), ``audit`` (a self-audit
record, written like a record but not counted), ``filtered`` (a valid event no
subscription wanted). ``events``: the valid events the row accounts for; ``source``: a
single request's Kafka topic, for its audit outcome. Arrow is the source of truth: a
sender process builds its rows with it, and the Spark schema is derived from it."""
SEND_COLUMNS = 5
"""The batching query's ready batches have the first five columns only."""
_REQUESTS = pa.array(["single", "batch"])
_RECORDS = pa.array(["record", "audit"])


def send_work(
    batches: Iterable[pa.RecordBatch],
    targets: Mapping[str, Target],
    settings: Settings,
    stage: StageSettings,
    pool: Callable[[], WorkerPool],
    *,
    failing: Collection[str] = frozenset(),
    gone: Collection[str] = frozenset(),
) -> BatchSummary | None:
    """Do the work ``batches`` hold (rows of :data:`WORK_ARROW_SCHEMA`); what happened, in
    counts, or ``None`` when there was nothing to do. ``pool`` is asked for only then.
    Requests to the ``failing`` endpoints go to the retry path unsent; those of the
    ``gone`` subscriptions are dead-lettered unsent."""
    now = datetime.now(timezone.utc)
    summary = BatchSummary()
    pendings: list[Pending] = []
    topics: dict[str, str] = {}
    records: list[KafkaRecord] = []
    for batch in batches:
        if not batch.num_rows:  # a poll of batch-mode pairs only: spare the compute calls their fixed cost
            continue
        pendings += _pendings(batch, now, topics)
        records += _count_records(batch, summary)
    if not (pendings or records or summary.events):
        return None
    kept = pool()
    started = time.perf_counter()
    if records:
        # Acknowledged before the stage: a quarantine copy, bundle or consumed-audit
        # record is never lost to a failed send.
        produce_all(kept.producer, records)
        summary.phase_seconds["records"] += time.perf_counter() - started
    if pendings:
        started = time.perf_counter()
        settled: list[State] = []
        summary.deliveries = run_stage(pendings, targets, kept.store, kept.transport, stage, failing=failing,
                                       gone=gone, run=kept.run, on_settled=settled.extend)
        write_outcomes(kept, settings, settled, topics, settings.delivery.batch_topic)
        summary.phase_seconds["send"] += time.perf_counter() - started
    return summary


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
    # Column by column: a dict per row costs more than the request it describes.
    kinds, subscriptions, endpoints, event_ids, bodies, sources = (
        requests.column(name).to_pylist()
        for name in ("kind", "subscription_id", "endpoint_id", "event_ids", "body", "source"))
    pendings = []
    for kind, subscription_id, endpoint_id, ids, body, source in zip(
            kinds, subscriptions, endpoints, event_ids, bodies, sources, strict=True):
        pendings.append(Pending.first(Kind(kind), ids, body, subscription_id=subscription_id,
                                      endpoint_id=endpoint_id, now=now))
        if source is not None:
            topics[ids[0]] = source
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


__all__ = ["SEND_COLUMNS", "WORK_ARROW_SCHEMA", "send_work", "write_outcomes"]
