"""`wayline run recon`: the recon query (``wayline.pipelines.recon_plan``) and its driver.

In each micro-batch the driver collects the processor's output, writes the missing, found
and metrics events, and applies the window changes to PostgreSQL (``wayline.recon.store``).

Reconciliations change without a lost record: the driver polls their version between
micro-batches and restarts the query on its checkpoint when it moved (the plan holds the
topics and the expressions that read ids; a bucket's state survives, and takes the new
periods).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from wayline.core.errors import RetryLater, WaylineError
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.pipelines.job import RestartingQuery
from wayline.pipelines.micro_batch import concise_failures
from wayline.pipelines.recon_plan import ReconSet, load_recon_set, recon_stream
from wayline.pipelines.recon_processor import CHANGE, FOUND, MARK, MISSING
from wayline.recon import reconciliation as service
from wayline.recon import store
from wayline.recon.events import id_event, metrics_event
from wayline.recon.figures import COUNT_NAMES, Counts, Emitted
from wayline.registry.db import Database


@dataclass
class ReconCounters:
    batches: int = 0
    restarts: int = 0
    missing: int = 0
    found: int = 0
    published: int = 0
    figures: dict[tuple[str, str], Counts] = field(default_factory=lambda: defaultdict(Counts))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class ReconJob:
    """The recon query and its driver-side loop: version polling, restarts, outputs."""

    def __init__(self, spark: SparkSession, settings: Settings, database: Database, checkpoint: Path) -> None:
        self._spark = spark
        self._settings = settings
        self._database = database
        self._checkpoint = checkpoint
        self._job = f"recon:{checkpoint.resolve()}"
        self.counters = ReconCounters()
        self._set = load_recon_set(database)
        self._checked_at = time.monotonic()
        self._running = RestartingQuery("recon", self._start_query, self._restarted)
        self._producer = Producer({"bootstrap.servers": settings.kafka_bootstrap(), "linger.ms": 5})

    @property
    def query(self) -> StreamingQuery | None:
        return self._running.query

    @property
    def recon_set(self) -> ReconSet:
        return self._set

    @property
    def isActive(self) -> bool:  # noqa: N802 - the StreamingQuery protocol `watch` expects
        return self._running.isActive

    def exception(self) -> BaseException | None:
        return self._running.exception()

    def start(self) -> ReconJob:
        self._running.begin()
        return self

    def stop(self) -> None:
        self._running.stop()
        self._producer.flush(30)
        self._producer.close()

    def _restarted(self) -> None:
        self.counters.restarts += 1

    def _start_query(self) -> StreamingQuery:
        specs = self._set.specs
        if not specs:
            raise WaylineError("no enabled reconciliation: create one with `wayline recon create` or the admin API")
        ensure_topics(self._settings.kafka_bootstrap(), {spec.output_topic for spec in specs},
                      self._settings.recon.output_partitions)
        return (
            recon_stream(self._spark, self._settings, specs).writeStream.queryName("wayline-recon")
            .option("checkpointLocation", str(self._checkpoint))
            .trigger(processingTime=f"{int(self._settings.recon.trigger_interval_s * 1000)} milliseconds")
            .foreachBatch(concise_failures("wayline-recon", self._batch))
            .start()
        )

    def _poll(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self._settings.recon.version_poll_s:
            return
        self._checked_at = now
        with self._database.transaction() as session:
            version = service.recon_version(session)
        if version != self._set.version:
            self._set = load_recon_set(self._database)
            self._running.restart()

    # -- one micro-batch ------------------------------------------------------------------------

    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        # The one Spark job of the micro-batch: a bucket's output is a few rows per window.
        rows = batch.collect()
        specs = self._set.by_id()
        changes: dict[tuple[str, str, int], Counts] = defaultdict(Counts)
        marks: dict[str, int] = {}
        emitted: list[tuple[str, Emitted]] = []
        for row in rows:
            if row.kind == CHANGE:
                changes[(row.recon_id, row.source, row.window_start)].add(
                    Counts(**{name: row[name] for name in COUNT_NAMES}))
            elif row.kind == MARK:
                marks[row.recon_id] = max(marks.get(row.recon_id, row.watermark), row.watermark)
            else:
                emitted.append((row.recon_id, Emitted(row.kind, row.id, row.source, row.expected_time,
                                                      row.actual_time, row.watermark)))
        emitted.sort(key=lambda pair: (pair[0], pair[1].expected_time, pair[1].id, pair[1].kind != MISSING))
        tenant = self._settings.recon.tenant
        for recon_id, event in emitted:
            spec = specs.get(recon_id)
            if spec is not None:
                self._produce(spec.output_topic, event.id, id_event(recon_id, spec.name, tenant, event))
        with self._database.transaction() as session:
            published = store.apply_batch(
                session, self._job, batch_id, {i: s.periods.o for i, s in specs.items()},
                {i: s.periods.n for i, s in specs.items()},
                [store.WindowChange(r, s, w, c) for (r, s, w), c in changes.items()], marks, emitted,
            )
            for window in published or []:
                spec = specs[window.reconciliation_id]
                self._produce(spec.output_topic, f"{window.source}/{window.window_start}",
                              metrics_event(spec.id, spec.name, tenant, window.figures()))
            # Before the commit: a crash in between replays the micro-batch, which publishes again.
            if self._producer.flush(30):
                raise RetryLater("the recon events were not acknowledged by Kafka within 30 s")
        self._account(published, emitted, changes)
        self._poll()

    def _produce(self, topic: str, key: str, event: dict[str, Any]) -> None:
        while True:
            try:
                self._producer.produce(topic, key=key.encode(), value=orjson.dumps(event))
                return
            except BufferError:
                self._producer.poll(0.1)

    def _account(self, published: list[store.Window] | None, emitted: list[tuple[str, Emitted]],
                 changes: dict[tuple[str, str, int], Counts]) -> None:
        counters = self.counters
        with counters._lock:
            counters.batches += 1
            counters.missing += sum(1 for _, e in emitted if e.kind == MISSING)
            counters.found += sum(1 for _, e in emitted if e.kind == FOUND)
            counters.published += len(published or [])
            if published is not None:
                for (recon_id, source, _), counts in changes.items():
                    counters.figures[(recon_id, source)].add(counts)



__all__ = ["ReconCounters", "ReconJob"]
