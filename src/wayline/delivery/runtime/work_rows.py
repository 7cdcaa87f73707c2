"""Work rows in Arrow: the columns the delivery queries produce, and a batch of them read as
:class:`~wayline.delivery.runtime.send_step.Work`.

Only a Spark sending task (:mod:`wayline.pipelines.sending`, inside ``mapInArrow``)
reads work as Arrow: a sender process builds its :class:`~wayline.delivery.runtime.send_step.Work`
straight from the records it consumed, and never loads Arrow. No Spark import here either.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from wayline.core.kafka import KafkaRecord
from wayline.delivery.attempt import Kind
from wayline.delivery.outcomes import BatchSummary
from wayline.delivery.runtime.send_step import Work, WorkRequest

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
single request's Kafka topic, for its audit outcome. Arrow is the source of truth: the
Spark schema is derived from it."""
SEND_COLUMNS = 5
"""The batching query's ready batches have the first five columns only."""


@functools.cache
def _kinds(*names: str) -> pa.Array:
    """``names`` as an array, for ``is_in``. Made on first use: pyarrow imports pandas (35 MB resident)
    to convert a Python value, and the driver that imports this module to plan the
    delivery queries never reads a work row."""
    return pa.array(names)


def work_of(batches: Iterable[pa.RecordBatch]) -> Work:
    """The work ``batches`` hold (rows of :data:`WORK_ARROW_SCHEMA`)."""
    work = Work()
    for batch in batches:
        if not batch.num_rows:  # a poll of batch-mode pairs only: spare the compute calls their fixed cost
            continue
        work.requests.extend(_requests(batch))
        work.records.extend(_count_records(batch, work.counts))
    return work


def _requests(batch: pa.RecordBatch) -> list[WorkRequest]:
    # The HTTP edge: per-row Python is where the rows become signed requests anyway.
    requests = batch.filter(pc.is_in(batch.column("kind"), _kinds("single", "batch")))
    # Column by column: a dict per row costs more than the request it describes.
    kinds, subscriptions, endpoints, event_ids, bodies, sources = (
        requests.column(name).to_pylist()
        for name in ("kind", "subscription_id", "endpoint_id", "event_ids", "body", "source"))
    return [WorkRequest(Kind(kind), subscription_id, endpoint_id, ids, body, source)
            for kind, subscription_id, endpoint_id, ids, body, source in zip(
                kinds, subscriptions, endpoints, event_ids, bodies, sources, strict=True)]


def _count_records(batch: pa.RecordBatch, summary: BatchSummary) -> list[KafkaRecord]:
    """Add ``batch``'s counts to ``summary``; its Kafka records to write."""
    kinds = batch.column("kind")
    summary.events += pc.sum(batch.column("events")).as_py() or 0
    summary.filtered += pc.sum(pc.equal(kinds, "filtered")).as_py() or 0
    records = batch.filter(pc.is_in(kinds, _kinds("record", "audit")))
    written = []
    for row in records.select(["kind", "topic", "key", "body", "headers", "reason", "event_ids"]).to_pylist():
        if row["reason"] is not None:
            summary.quarantined[row["reason"]] += 1
        elif row["kind"] == "record":  # a bundle: its events wait for their batch
            summary.held += len(row["event_ids"])
        written.append(KafkaRecord(row["topic"], row["key"], row["body"],
                                   [(h["key"], h["value"]) for h in row["headers"] or ()]))
    return written


__all__ = ["SEND_COLUMNS", "WORK_ARROW_SCHEMA", "work_of"]
