"""The matching query's view of the intake topic: each record as read from its own topic."""

from __future__ import annotations

from datetime import datetime

from wayline.delivery.runtime.intake import ORIGIN_HEADERS
from wayline.pipelines.intake_source import from_origin

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int, headers array<struct<key:string,value:binary>>")


def _origin(topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    return list(zip(ORIGIN_HEADERS, (topic.encode(), str(partition).encode(), str(offset).encode()), strict=True))


def test_the_origin_headers_become_the_kafka_columns_and_leave_the_headers(spark) -> None:
    at = datetime(2026, 11, 25, 12, 0, 0)
    own = [("trace", b"t-1"), ("wayline-origin-topic", b"forged"), ("empty", None)]
    intake = spark.createDataFrame([
        (b"k", b"v1", "wayline.delivery.intake", 0, 17, at, 0, own + _origin("events.orders", 3, 41)),
        (None, b"v2", "wayline.delivery.intake", 0, 18, at, 0, _origin("alerts.fraud", 0, 9_000_000_000)),
    ], KAFKA_DDL)
    rows = from_origin(intake).collect()
    assert from_origin(intake).columns == intake.columns
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.headers) for r in rows] == [
        (b"k", b"v1", "events.orders", 3, 41, at, [(k, v) for k, v in own]),
        # No headers of its own: as Spark's Kafka source reads such a record, none at all.
        (None, b"v2", "alerts.fraud", 0, 9_000_000_000, at, None),
    ]
