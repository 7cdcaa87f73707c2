"""The recon query's step between routing and the shuffle (``mapInArrow``), in its Python
workers: each routed batch's quarantine copies written to Kafka and acknowledged, then its
records clocked and packed per (reconciliation, bucket) (``wayline.recon.packing``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from wayline.core.kafka import KafkaRecord, produce_all
from wayline.core.settings import Settings
from wayline.recon import packing

log = logging.getLogger(__name__)

PACKED_SCHEMA = StructType([
    StructField("recon_id", StringType()), StructField("bucket", IntegerType()),
    *(StructField(name, ArrayType(StringType())) for name in ("side", "id", "source")),
    StructField("time", ArrayType(LongType())),
])


def packed(settings: Settings) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` step between routing and the shuffle: each routed batch's quarantine
    copies written and acknowledged, then its records clocked and packed (``packing``)."""
    bootstrap, buckets = settings.kafka_bootstrap(), settings.recon.buckets
    max_bytes = settings.kafka.quarantine_max_bytes

    def pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            copies = batch.column("copy")
            if copies.null_count < batch.num_rows:  # the metadata answers: a healthy batch costs nothing here
                _quarantine(copies.filter(copies.is_valid()).to_pylist(), bootstrap, max_bytes)
                batch = batch.filter(batch.column("recon_id").is_valid())
            yield from packing.pack([packing.clocked(batch.drop_columns(["copy"]), buckets)])

    return pack


def _quarantine(copies: list[dict[str, Any]], bootstrap: str, max_bytes: int) -> None:
    produce_all(_producer(bootstrap, max_bytes), (
        KafkaRecord(copy["topic"], copy["key"], copy["value"], [(h["key"], h["value"]) for h in copy["headers"]])
        for copy in copies))
    truncated = sum(1 for copy in copies if copy["truncated"])
    if truncated:
        log.warning("%d quarantine copies were too large for Kafka and reference their original instead", truncated)


@functools.cache
def _producer(bootstrap: str, max_bytes: int) -> Producer:
    """This Python worker's producer of quarantine copies, made on the first one."""
    # A copy is at most max_bytes as Kafka counts a record; the request around it needs a little more.
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                     "message.max.bytes": max_bytes + 64 * 1024})


__all__ = ["PACKED_SCHEMA", "packed"]
