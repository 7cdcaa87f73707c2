"""The one Kafka read every pipeline starts from: all event topics, by pattern."""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession

from wayline.core.settings import Settings


def event_topic_pattern(settings: Settings) -> str:
    return "^" + re.escape(settings.kafka.event_topic_prefix) + ".*"


def read_kafka(spark: SparkSession, settings: Settings, pattern: str | None = None) -> DataFrame:
    """A streaming DataFrame of raw Kafka records from the topics matching ``pattern`` (default:
    every event topic); offsets live in the query's checkpoint."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
        .option("subscribePattern", pattern or event_topic_pattern(settings))
        .option("startingOffsets", settings.kafka.starting_offsets)
        # Back-pressure: a burst is worked off in bounded micro-batches, not all at once.
        .option("maxOffsetsPerTrigger", settings.kafka.max_offsets_per_trigger)
        .option("includeHeaders", "true")
        .option("kafka.fetch.max.wait.ms", settings.kafka.fetch_max_wait_ms)
        .load()
    )


def write_to_kafka(frame: DataFrame, settings: Settings) -> None:
    """Batch-write rows that carry `topic`, `key`, `value` (and optionally `headers`)."""
    frame.write.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap()).save()


__all__ = ["event_topic_pattern", "read_kafka", "write_to_kafka"]
