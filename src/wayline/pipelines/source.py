"""The one Kafka read every pipeline starts from (all event topics, by pattern), and the
Kafka write they share."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from wayline.core.settings import Settings
from wayline.core.topics import event_topic_pattern


def read_kafka(spark: SparkSession, settings: Settings, pattern: str | None = None,
               starting_offsets: str | None = None, max_offsets_per_trigger: int | None = None,
               *, real_time: bool = False) -> DataFrame:
    """A streaming DataFrame of raw Kafka records from the topics matching ``pattern`` (default:
    every event topic), from ``starting_offsets`` on a new checkpoint (default:
    ``kafka.starting_offsets``), at most ``max_offsets_per_trigger`` per micro-batch
    (default: ``kafka.max_offsets_per_trigger``; none for a ``real_time`` query, which
    Spark refuses a limit); offsets live in the query's checkpoint."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
        .option("subscribePattern", pattern or event_topic_pattern(settings))
        .option("startingOffsets", starting_offsets or settings.kafka.starting_offsets)
        .option("includeHeaders", "true")
    )
    if real_time:
        # No range end: the broker gathers a fetch's records (kafka.stream_fetch_*), so a
        # poll takes tens of them rather than waking for each one.
        reader = (reader.option("kafka.fetch.min.bytes", settings.kafka.stream_fetch_min_bytes)
                  .option("kafka.fetch.max.wait.ms", settings.kafka.stream_fetch_max_wait_ms))
    else:
        # A micro-batch waits out one empty fetch per partition at the end of its range.
        reader = (reader.option("kafka.fetch.max.wait.ms", settings.kafka.fetch_max_wait_ms)
                  # Back-pressure: a burst is worked off in bounded micro-batches, not all at once.
                  .option("maxOffsetsPerTrigger", max_offsets_per_trigger or settings.kafka.max_offsets_per_trigger))
    return reader.load()


def write_to_kafka(frame: DataFrame, settings: Settings) -> None:
    """Batch-write rows that carry `topic`, `key`, `value` (and optionally `headers`)."""
    frame.write.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap()).save()


__all__ = ["read_kafka", "write_to_kafka"]
