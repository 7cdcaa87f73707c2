"""`wayline run recon`: every enabled reconciliation over one read of its topics.

The query::

    Kafka (every reconciliation's topics, one pattern) -> parse once (JVM)
      -> per reconciliation and side: (reconciliation, side, id, source, time) read by
         Spark SQL expressions (CloudEvents attributes or data.* paths); a record a side
         cannot read as ``unreadable``, and its quarantine copy
      -> the quarantine copies written from the packing step (acknowledged), then
         packed in Arrow (``wayline.recon.packing``): per input batch, one row of lists per
         (reconciliation, bucket = hash(id) % recon.buckets), so few rows cross PySpark's
         row-by-row input path of the stateful operator; every bucket of a reconciliation
         gets a heartbeat at the newest time of its records in the batch, so all share one clock
      -> ONE shuffle by (reconciliation, bucket)
      -> transformWithStateInPandas (processing-time mode) -> ReconProcessor: one
         ``wayline.recon.state.Bucket`` per key, live in its Python worker (the pairs that
         settle within a micro-batch filed column-wise), stored by chunk of event time
         (only the chunks a micro-batch changed are written)
      -> foreachBatch: ONE Spark job collects the changes; the driver writes the missing,
         found and metrics events (confluent-kafka) and applies the changes to PostgreSQL,
         guarded by the micro-batch id (``wayline.recon.store``).

Why a Python operator over coarse buckets and not the JVM's joins: ``docs/decisions.md``,
"Reconciliation (issue 14)". In short, a missing id must be reported ``n`` after its
time while the same id must still take corrections until ``m``: Spark's one watermark
per query emits an outer join's unmatched rows only when it drops their state, and drops
(silently) every row older than the watermark, so ``n < m`` cannot be expressed, nor
"too late" counted. Processing-time mode also gives the ``z`` timer, which event-time
mode cannot.

Reconciliations change without a lost record: the driver polls their version between
micro-batches and restarts the query on its checkpoint when it moved (the plan holds the
topics and the expressions that read ids; a bucket's state survives, and takes the new
periods).
"""

from __future__ import annotations

import functools
import logging
import pickle
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from wayline.core.errors import RetryLater, WaylineError
from wayline.core.kafka import KafkaRecord, ensure_topics, produce_all
from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events, quarantine_copy, rfc3339_time
from wayline.pipelines.job import RestartingQuery
from wayline.pipelines.micro_batch import concise_failures
from wayline.pipelines.source import delivered_topic_pattern, read_kafka
from wayline.recon import packing, store
from wayline.recon import reconciliation as service
from wayline.recon.events import id_event, metrics_event
from wayline.recon.periods import Periods
from wayline.recon.reconciliation import SideIn, Unreadable
from wayline.recon.state import COUNT_NAMES, SIDE_ORDER, UNREADABLE, Bucket, Counts, Emitted, Step
from wayline.registry.db import Database

log = logging.getLogger(__name__)

MISSING, FOUND, CHANGE, MARK = "missing", "found", "change", "mark"
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("recon_id", StringType()),
    StructField("id", StringType()),
    StructField("source", StringType()),
    StructField("window_start", LongType()),
    StructField("expected_time", LongType()),
    StructField("actual_time", LongType()),
    StructField("watermark", LongType()),
    *(StructField(name, LongType()) for name in COUNT_NAMES),
])
# The stored bucket: its clock and the timer registered for it (with the token of the
# chunks as last written), and its ids by chunk of event time.
_META_SCHEMA = StructType([StructField("token", LongType()), StructField("clock", LongType()),
                           StructField("moved_at", LongType()), StructField("timer", LongType())])
_CHUNK_KEY_SCHEMA = StructType([StructField("chunk", LongType())])
_CHUNK_SCHEMA = StructType([StructField("blob", BinaryType())])
PACKED_SCHEMA = StructType([
    StructField("recon_id", StringType()), StructField("bucket", IntegerType()),
    *(StructField(name, ArrayType(StringType())) for name in ("side", "id", "source")),
    StructField("time", ArrayType(LongType())),
])


@dataclass(frozen=True)
class ReconSpec:
    """A running reconciliation as the job uses it."""

    id: str
    name: str
    revision: int
    periods: Periods
    expected: SideIn
    actual: SideIn
    output_topic: str


@dataclass(frozen=True)
class ReconSet:
    version: int
    specs: tuple[ReconSpec, ...]

    def by_id(self) -> dict[str, ReconSpec]:
        return {spec.id: spec for spec in self.specs}


def load_recon_set(database: Database) -> ReconSet:
    with database.transaction() as session:
        version = service.recon_version(session)
        specs = tuple(
            ReconSpec(row.id, row.name, row.revision, service.periods_of(row), service.side_of(row, "expected"),
                      service.side_of(row, "actual"), row.output_topic)
            for row in service.running(session)
        )
    return ReconSet(version, specs)


# -- reading the records (JVM) -------------------------------------------------------------------


def side_regex(side: SideIn) -> str:
    """The side's topics as one regex; Kafka matches a subscription pattern against the whole name."""
    return f"(?:{side.pattern})" if side.pattern is not None else "(?:" + "|".join(map(re.escape, side.topics)) + ")"


def topics_pattern(specs: Sequence[ReconSpec]) -> str:
    return "^(?:" + "|".join(side_regex(side) for spec in specs for side in (spec.expected, spec.actual)) + ")$"


def _field(where: str) -> Column:
    if where.startswith("data."):
        # Validated at submit time as identifiers, so the path needs no quoting.
        return F.try_variant_get(F.col("data"), "$" + where[len("data"):], "string")
    if where == "time":
        return F.date_format(F.col("event_time"), "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")
    return F.col(where).cast("string")


def _time_ms(where: str) -> Column:
    if where == "time":
        return F.unix_millis(F.col("event_time"))
    return F.unix_millis(rfc3339_time(_field(where)))


# A routed row; ``copy`` is a quarantine copy as ``quarantine_copy`` makes it.
_ROUTE_FIELDS = (
    ("recon_id", "string"), ("side", "string"), ("id", "string"), ("source", "string"), ("time", "bigint"),
    ("bucket", "int"),
    ("copy", "struct<topic:string,key:binary,value:binary,headers:array<struct<key:string,value:binary>>,"
             "truncated:boolean>"),
)


def _route(**values: Column) -> Column:
    """A routed row, every field typed (NULL where not given), so all routes share one type."""
    return F.struct(*(values.get(name, F.lit(None)).cast(kind).alias(name) for name, kind in _ROUTE_FIELDS))


def routed_records(parsed: DataFrame, specs: Sequence[ReconSpec], settings: Settings) -> DataFrame:
    """Per reconciliation side a record of ``parsed`` (as ``parse_events`` makes it) is on, one
    row (recon_id, side, id, source, time, bucket); per record to quarantine, one row with only
    its ``copy``.

    - an event the side reads an id and a time of: a row of that side, in the bucket of its id;
    - a heartbeat: one row per reconciliation (``packing.clocked`` takes its time to every bucket);
    - any other record (not an event, or an event with no id or no RFC 3339 time where the
      side reads them): an ``unreadable`` row, to be counted in the window of the time the
      side reads, or else of its Kafka timestamp, under the source the side reads, or else "";
    - a quarantine copy: of an event some side cannot read, with reason
      :class:`~wayline.recon.reconciliation.Unreadable` (every such side named in the
      detail), and of a record that is not an event, with the envelope's reason, unless the
      event pipelines read its topic (they quarantine it): once per record.
    """
    buckets = settings.recon.buckets
    event = F.col("reason").isNull()
    sides = [(spec, name, side) for spec in specs for name, side in (("expected", spec.expected),
                                                                    ("actual", spec.actual))]
    # What each side reads of the record: NULL off the side's topics, and NULL fields for a
    # record that is not an event. Made once per record, before the routes read it.
    views = [F.when(F.col("topic").rlike(f"^{side_regex(side)}$"), F.struct(
        F.when(event, _field(side.id)).alias("id"), F.when(event, _time_ms(side.time)).alias("time"),
        F.when(event, _field(side.source)).alias("source"),
    )).alias(f"_side{number}") for number, (_, _, side) in enumerate(sides)]
    staged = parsed.select(
        "key", "value", "headers", "topic", "partition", "offset", "timestamp", "event_time", "reason", "detail",
        event.alias("_event"), (event & (F.col("type") == F.lit(settings.recon.heartbeat_type))).alias("_beat"),
        *views)
    is_event, beat = F.col("_event"), F.col("_beat")
    spread = F.pmod(F.xxhash64("topic", "partition", "offset"), F.lit(buckets))
    routes, no_id, bad_time = [], [], []
    on_spec: dict[str, Column] = defaultdict(lambda: F.lit(False))
    for number, (spec, side_name, side) in enumerate(sides):
        view = F.col(f"_side{number}")
        on_side = view.isNotNull()
        on_spec[spec.id] = on_spec[spec.id] | on_side
        missing_id = F.coalesce(view["id"], F.lit("")) == F.lit("")
        read = on_side & is_event & ~beat
        named = f"reconciliation {spec.name}, {side_name} side"
        no_id.append(F.when(read & missing_id, F.lit(f"{named}: no id at {side.id}")))
        bad_time.append(F.when(read & view["time"].isNull(),
                               F.lit(f"{named}: {side.time} is not an RFC 3339 date-time")))
        readable = is_event & ~missing_id & view["time"].isNotNull()
        routes.append(F.when(on_side & ~beat, _route(
            recon_id=F.lit(spec.id), side=F.when(readable, F.lit(side_name)).otherwise(F.lit(UNREADABLE)),
            id=F.when(readable, view["id"]).otherwise(F.lit("")), source=F.coalesce(view["source"], F.lit("")),
            time=F.coalesce(view["time"], F.unix_millis(F.col("timestamp"))),
            bucket=F.when(readable, F.pmod(F.xxhash64(view["id"]), F.lit(buckets))).otherwise(spread))))
    for spec_id, on in on_spec.items():
        routes.append(F.when(on & beat, _route(
            recon_id=F.lit(spec_id), side=F.lit("heartbeat"), id=F.lit(""), source=F.lit(""),
            time=F.unix_millis(F.col("event_time")), bucket=F.lit(0))))
    on_any = functools.reduce(Column.__or__, on_spec.values())
    judged = staged.withColumn("_unreadable", F.when(F.coalesce(*no_id).isNotNull(), F.lit(
        Unreadable.MISSING_ID.value)).when(F.coalesce(*bad_time).isNotNull(), F.lit(Unreadable.BAD_TIME.value)))
    # An event's copy carries the reconciliation's reason; a record that is not an event, the envelope's.
    marked = judged.withColumns({
        "_quarantined": F.when(is_event, F.col("_unreadable").isNotNull()).otherwise(
            on_any & ~F.col("topic").rlike(delivered_topic_pattern(settings))),
        "reason": F.coalesce(F.col("reason"), F.col("_unreadable")),
        "detail": F.when(F.col("_unreadable").isNotNull(), F.concat_ws("; ", *no_id, *bad_time)).otherwise(
            F.col("detail")),
    })
    copy = quarantine_copy(settings.kafka.quarantine_topic, settings.kafka.quarantine_max_bytes)
    routes.append(F.when(F.col("_quarantined"), _route(copy=copy)))
    return marked.select(F.explode(F.array(*routes)).alias("r")).where(F.col("r").isNotNull()).select("r.*")


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


# -- the stateful processor ----------------------------------------------------------------------


class ReconProcessor(StatefulProcessor):
    """One key is (reconciliation, bucket); its state is a :class:`Bucket` stored by chunk of event time.

    A Python worker keeps each key's bucket live between micro-batches, as the rules engine
    keeps its evaluators: the stored meta carries a random token, rewritten with the state;
    a worker whose cached bucket has the stored token uses it, any other worker (or the same
    one after a failed or replayed micro-batch, whose state the store rolled back) rebuilds
    it from the stored chunks. Only the chunks a micro-batch changed are written back.
    """

    # (reconciliation, bucket) -> (token of the state it was last written as, the bucket); one
    # per Python worker, shared by the tasks the worker runs one after another.
    _live: dict[tuple[str, int], tuple[int, Bucket]] = {}

    def __init__(self, periods: dict[str, Periods]) -> None:
        self._periods = periods

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._meta = handle.getValueState("meta", _META_SCHEMA)
        self._chunks = handle.getMapState("chunks", _CHUNK_KEY_SCHEMA, _CHUNK_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        frame = packing.unpacked(rows)
        unreadable = (frame["side"] == UNREADABLE).to_numpy()
        counted = None
        if unreadable.any():
            counted = (frame["source"].to_numpy()[unreadable], frame["time"].to_numpy()[unreadable])
            frame = frame[~unreadable]
        # The reconciler takes records in (time, side, id) order: sorted here, column-wise.
        frame = frame.assign(order=frame["side"].map(SIDE_ORDER)).sort_values(["time", "order", "id"])
        yield self._step((key[0], int(key[1])), (frame["side"].to_numpy(), frame["id"].to_numpy(),
                                                 frame["source"].to_numpy(), frame["time"].to_numpy()),
                         timerValues.getCurrentProcessingTimeInMs(), unreadable=counted)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        yield self._step((key[0], int(key[1])), ([], [], [], []), timerValues.getCurrentProcessingTimeInMs(),
                         fired=True)

    def close(self) -> None:
        pass

    def _bucket(self, group: tuple[str, int], meta: tuple | None, periods: Periods) -> Bucket:
        # Taken out while in use: a task that fails half-way leaves no half-changed bucket behind.
        cached = self._live.pop(group, None)
        if meta is not None and cached is not None and cached[0] == meta[0]:
            cached[1].periods = periods
            return cached[1]
        if meta is None:
            return Bucket(periods)
        return Bucket.restore(periods, meta[1], meta[2], (pickle.loads(value[0]) for value in self._chunks.values()))

    def _step(self, group: tuple[str, int], columns: tuple[Sequence, Sequence, Sequence, Sequence], now: int,
              fired: bool = False, unreadable: tuple[Sequence, Sequence] | None = None) -> pd.DataFrame:
        """``columns``: the records (side, id, source, time) in order; ``unreadable``: the
        (source, time) of the records the reconciliation could not read."""
        recon_id = group[0]
        meta = self._meta.get()
        timer = None if fired or meta is None else meta[3]  # Spark removed a timer that fired
        periods = self._periods.get(recon_id)
        if periods is None:  # the reconciliation was removed or disabled: so is its state
            if timer is not None:
                self._handle.deleteTimer(timer)
            self._meta.clear()
            self._chunks.clear()
            self._live.pop(group, None)
            return _frame([])
        bucket = self._bucket(group, meta, periods)
        step = bucket.process_sorted(*columns, now)
        if unreadable is not None:
            bucket.count_unreadable(*unreadable, step)
        for number, chunk in bucket.take_changed().items():
            if chunk is None:
                self._chunks.removeKey((number,))
            else:
                self._chunks.updateValue((number,), (pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL),))
        wake = bucket.wake_at
        if wake != timer:
            if timer is not None:
                self._handle.deleteTimer(timer)
            if wake is not None:
                self._handle.registerTimer(wake)
        if bucket.size or bucket.clock is not None:
            token = random.getrandbits(63)
            self._meta.update((token, bucket.clock, bucket.moved_at, wake))
            self._live[group] = (token, bucket)
        return _frame(_rows(recon_id, step))


def _rows(recon_id: str, step: Step) -> list[tuple[Any, ...]]:
    none_counts = (None,) * len(COUNT_NAMES)
    out: list[tuple[Any, ...]] = [
        (e.kind, recon_id, e.id, e.source, None, e.expected_time, e.actual_time, e.watermark, *none_counts)
        for e in step.emitted
    ]
    for (source, window), counts in step.counts.items():
        if counts:
            out.append((CHANGE, recon_id, None, source, window, None, None, None,
                        *(getattr(counts, name) for name in COUNT_NAMES)))
    if step.watermark is not None:
        out.append((MARK, recon_id, None, None, None, None, None, step.watermark, *none_counts))
    return out


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=[f.name for f in OUTPUT_SCHEMA.fields])


def recon_stream(spark: SparkSession, settings: Settings, specs: Sequence[ReconSpec]) -> DataFrame:
    raw = read_kafka(spark, settings, topics_pattern(specs))
    routed = routed_records(parse_events(raw, settings.envelope), specs, settings)
    keyed = routed.mapInArrow(packed(settings), PACKED_SCHEMA)
    return keyed.groupBy("recon_id", "bucket").transformWithStateInPandas(
        statefulProcessor=ReconProcessor({spec.id: spec.periods for spec in specs}),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        # Processing time: the z timeout needs its timers, and no row is dropped by a
        # watermark (the reconciler judges lateness itself, and counts what is too late).
        timeMode="ProcessingTime",
    )


# -- the job ------------------------------------------------------------------------------------


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


__all__ = [
    "OUTPUT_SCHEMA", "ReconCounters", "ReconJob", "ReconProcessor", "ReconSet", "ReconSpec", "load_recon_set",
    "packed", "recon_stream", "routed_records", "side_regex", "topics_pattern",
]
