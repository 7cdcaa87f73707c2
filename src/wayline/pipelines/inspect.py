"""`wayline run inspect`: read every event topic, parse, count per type and per quarantine reason.

It proves the connector, the broker and the parser work together, and its counts are
what the live terminal view shows. It writes nothing: the delivery job owns the
quarantine copies of bad records (``docs/decisions.md``).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events, quarantine_copy
from wayline.pipelines.source import read_kafka


@dataclass
class InspectCounts:
    """Running totals, updated by the query's batches and read by the terminal view."""

    per_type: Counter[str] = field(default_factory=Counter)
    per_reason: Counter[str] = field(default_factory=Counter)
    truncated: int = 0
    """Bad records whose quarantine copy would be too large for Kafka: the delivery job
    writes a reference to the original instead."""
    batches: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rows: list[tuple[str | None, str | None, int]], truncated: int = 0) -> None:
        with self._lock:
            self.truncated += truncated
            for reason, event_type, count in rows:
                if reason is None:
                    self.per_type[event_type or ""] += count
                else:
                    self.per_reason[reason] += count
            self.batches += 1

    def snapshot(self) -> tuple[Counter[str], Counter[str], int]:
        with self._lock:
            return Counter(self.per_type), Counter(self.per_reason), self.batches

    @property
    def valid(self) -> int:
        return sum(self.snapshot()[0].values())

    @property
    def quarantined(self) -> int:
        return sum(self.snapshot()[1].values())


def start_inspect(
    spark: SparkSession,
    settings: Settings,
    counts: InspectCounts,
    *,
    checkpoint: Path | None = None,
    available_now: bool = False,
) -> StreamingQuery:
    copy = quarantine_copy(settings.kafka.quarantine_topic, settings.kafka.quarantine_max_bytes)

    def process(batch: DataFrame, _batch_id: int) -> None:
        rows = parse_events(batch, settings.envelope).groupBy("reason", "type").agg(
            F.count(F.lit(1)).alias("count"),
            F.count_if(F.col("reason").isNotNull() & copy["truncated"]).alias("truncated"),
        ).collect()
        counts.add([(r["reason"], r["type"], r["count"]) for r in rows], sum(r["truncated"] for r in rows))

    writer = (
        read_kafka(spark, settings)
        .writeStream.queryName("wayline-inspect")
        .option("checkpointLocation", str(checkpoint or settings.checkpoint_root / "inspect"))
        .foreachBatch(process)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start()


__all__ = ["InspectCounts", "start_inspect"]
