"""`wayline run inspect`: read every event topic, parse, quarantine, count per type.

It proves the connector, the broker and the parser work together, and its counts are
what the live terminal view shows.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events
from wayline.pipelines.source import read_kafka, write_quarantine


@dataclass
class InspectCounts:
    """Running totals, updated by the query's batches and read by the terminal view."""

    per_type: Counter[str] = field(default_factory=Counter)
    per_reason: Counter[str] = field(default_factory=Counter)
    truncated: int = 0
    """Quarantine copies too large for Kafka, written as a reference to their original."""
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
    def process(batch: DataFrame, _batch_id: int) -> None:
        parsed = parse_events(batch, max_bytes=settings.envelope.max_bytes).persist()
        try:
            rows = [(r["reason"], r["type"], r["count"]) for r in parsed.groupBy("reason", "type").count().collect()]
            truncated = write_quarantine(parsed, settings) if any(reason is not None for reason, _, _ in rows) else 0
            counts.add(rows, truncated)
        finally:
            parsed.unpersist()

    writer = (
        read_kafka(spark, settings)
        .writeStream.queryName("wayline-inspect")
        .option("checkpointLocation", str(checkpoint or settings.checkpoint_root / "inspect"))
        .foreachBatch(process)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start()


__all__ = ["InspectCounts", "start_inspect"]
