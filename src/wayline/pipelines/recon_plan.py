"""The recon job's query: every enabled reconciliation over one read of its topics::

    Kafka (every reconciliation's topics, one pattern) -> parse once (JVM)
      -> per reconciliation and side: (reconciliation, side, id, source, time) read by
         Spark SQL expressions (CloudEvents attributes or data.* paths); a record a side
         cannot read as ``unreadable``, and its quarantine copy
      -> the quarantine copies written from the packing step (acknowledged), then
         packed in Arrow (``wayline.pipelines.recon_packing``): per input batch, one row of
         lists per (reconciliation, bucket = hash(id) % recon.buckets), so few rows cross
         PySpark's row-by-row input path of the stateful operator; every bucket of a
         reconciliation gets a heartbeat at the newest time of its records in the batch, so
         all share one clock
      -> ONE shuffle by (reconciliation, bucket)
      -> transformWithStateInPandas (processing-time mode) -> ReconProcessor
         (``wayline.pipelines.recon_processor``): one ``wayline.recon.state.Bucket`` per key,
         live in its Python worker (the pairs that settle within a micro-batch filed
         column-wise), stored by chunk of event time (only the chunks a micro-batch changed
         are written)
      -> foreachBatch (``wayline.pipelines.recon_job``): ONE Spark job collects the changes;
         the driver writes the missing, found and metrics events (confluent-kafka) and
         applies the changes to PostgreSQL, guarded by the micro-batch id (``wayline.recon.store``).

Why a Python operator over coarse buckets and not the JVM's joins: ``docs/decisions.md``,
"Reconciliation (issue 14)". In short, a missing id must be reported ``n`` after its
time while the same id must still take corrections until ``m``: Spark's one watermark
per query emits an outer join's unmatched rows only when it drops their state, and drops
(silently) every row older than the watermark, so ``n < m`` cannot be expressed, nor
"too late" counted. Processing-time mode also gives the ``z`` timer, which event-time
mode cannot.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from wayline.core.settings import Settings
from wayline.core.topics import delivered_topic_pattern
from wayline.pipelines.envelope import parse_events, quarantine_copy, rfc3339_time
from wayline.pipelines.recon_packing import PACKED_SCHEMA, packed
from wayline.pipelines.recon_processor import OUTPUT_SCHEMA, ReconProcessor
from wayline.pipelines.source import read_kafka
from wayline.recon import reconciliation as service
from wayline.recon.periods import Periods
from wayline.recon.reconciliation import SideIn, Unreadable
from wayline.recon.state import UNREADABLE
from wayline.registry.db import Database


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


__all__ = ["ReconSet", "ReconSpec", "load_recon_set", "recon_stream", "routed_records", "side_regex", "topics_pattern"]
