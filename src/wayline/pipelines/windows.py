"""Fixed window rules as one Spark streaming aggregation, in the rules query.

Every tumbling or hopping window rule the JVM can run (``wayline.rules.aggregation``):

    events -> a row per (rule, window) for each event passing the rule's WHERE
      -> groupBy(rule, partition key, window end), state in RocksDB, append mode
      -> per closed window: HAVING, then the output event -> rows like the processor's EMITs

The window end is the aggregation's event-time column: Spark emits a group once the
watermark reaches it, and drops rows whose window it has already passed. The state's
schema is the same whatever the rules (``SLOTS`` argument slots), so that a rule change
restarts the query on its checkpoint instead of needing a fresh one. A rule's state is
keyed by its ``state_key`` (id and revision): a changed rule starts fresh; a removed rule's
windows still close, and the job drops their output.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from wayline.pipelines.rule_output import output_record
from wayline.rules.aggregation import COUNT_ALL, FOLDS, KEY, SLOTS, TENANT, WINDOW_END, fold_column
from wayline.rules.columns import DATA
from wayline.rules.counters import EMIT
from wayline.rules.engine import ActiveRule
from wayline.rules.expression import ColumnPath

# Spark's marker of an event-time column (EventTimeWatermark.delayKey): a grouping column
# carrying it is the one the watermark closes groups by.
_WATERMARK_DELAY = "spark.watermarkDelayMs"
_SLOT_COLUMNS = [f"__slot{slot}" for slot in range(SLOTS)]


def key_column(path: ColumnPath) -> Column:
    """A partition-key column as a string, as every stateful rule reads it."""
    if path[0] == DATA:
        # parse_key admitted identifiers only, so the path needs no quoting.
        return F.try_variant_get(F.col(DATA), "$." + ".".join(path[1:]), "string")
    return F.col(path[0]).cast("string")


def key_json(paths: Sequence[ColumnPath]) -> Column:
    """The partition key's values as one JSON array: the stateful rules' key and the part of
    their output ids that names it."""
    return F.to_json(F.array(*map(key_column, paths)))


def _entry(rule: ActiveRule) -> Column:
    """The event as one row of a rule's windows, NULL where it fails WHERE."""
    spec = rule.compiled.aggregation
    assert spec is not None
    micros = F.unix_micros(F.col("event_time"))
    slots = [F.expr(sql).cast("double") for sql in spec.slots]
    slots += [F.lit(None).cast("double")] * (SLOTS - len(slots))
    entry = F.struct(
        F.lit(rule.state_key).alias("rule"),
        key_json(rule.compiled.partition_key).alias("key"),
        # The end of the latest window holding the event; the others are a slide apart.
        (micros - F.pmod(micros, F.lit(spec.slide_us)) + F.lit(spec.size_us)).alias("last_end"),
        F.lit(spec.slide_us).alias("slide"),
        F.lit(spec.windows_per_event).alias("windows"),
        F.col("tenantid"), F.col("event_time"),
        *(slot.alias(name) for slot, name in zip(slots, _SLOT_COLUMNS, strict=True)),
    )
    return F.when(F.expr(spec.where), entry) if spec.where else entry


def window_rows(events: DataFrame, rules: Sequence[ActiveRule], lateness_ms: int) -> DataFrame:
    """One row per (rule, window) of each event, with the window's end as event time."""
    entries = [_entry(rule) for rule in rules]
    if not entries:
        # No window rule yet: the operator is there all the same, so that adding one later
        # restarts the query on a checkpoint that has it.
        entries = [F.when(F.lit(False), _entry_shape())]
    wheres = [rule.compiled.aggregation.where for rule in rules]  # type: ignore[union-attr]
    if rules and all(wheres):
        # Most events pass no window rule's WHERE: drop them before building the array.
        events = events.where(reduce(Column.__or__, (F.expr(where) for where in wheres)))
    exploded = events.select(F.explode(F.array(*entries)).alias("w")).where(F.col("w").isNotNull()).select("w.*")
    ends = exploded.select("*", F.explode(F.sequence(F.lit(0), F.col("windows") - 1)).alias("nth"))
    end = F.timestamp_micros(F.col("last_end") - F.col("nth") * F.col("slide"))
    return ends.select(
        "rule", "key", end.alias(WINDOW_END, metadata={_WATERMARK_DELAY: lateness_ms}),
        "tenantid", "event_time", *_SLOT_COLUMNS,
    )


def _entry_shape() -> Column:
    return F.struct(
        F.lit("").alias("rule"), F.lit("").alias("key"), F.lit(0).cast("long").alias("last_end"),
        F.lit(1).cast("long").alias("slide"), F.lit(1).alias("windows"),
        # The event's columns, though never used: see pipelines.rules_plan._reading_every_column.
        F.col("tenantid"), F.col("event_time"),
        *(F.lit(None).cast("double").alias(name) for name in _SLOT_COLUMNS),
    )


def aggregated(rows: DataFrame) -> DataFrame:
    """Every window's folds: the fixed state schema (see the module's docstring)."""
    folds = {"count": F.count, "sum": F.sum, "min": F.min, "max": F.max}
    return rows.groupBy("rule", "key", WINDOW_END).agg(
        F.count(F.lit(1)).alias(COUNT_ALL),
        F.max_by("tenantid", "event_time").alias(TENANT),
        *(folds[fold](name).alias(fold_column(fold, slot))
          for slot, name in enumerate(_SLOT_COLUMNS) for fold in FOLDS),
    )


def _record(rule: ActiveRule) -> Column:
    """A closed window's output as the processor's EMIT row, NULL where HAVING rejects it."""
    spec = rule.compiled.aggregation
    assert spec is not None
    keys = len(rule.compiled.partition_key)
    subject = F.concat_ws("/", *(F.coalesce(F.col(f"{KEY}{i}"), F.lit("")) for i in range(keys))) if keys \
        else F.lit(None).cast("string")
    start_micros = F.unix_micros(F.col(WINDOW_END)) - F.lit(spec.size_us)
    origin = F.concat_ws("\x1f", F.col("key"), start_micros.cast("string"))
    output = output_record(rule, spec.select, origin, subject, F.col(WINDOW_END), F.col(TENANT))
    record = F.struct(output["topic"].alias("out_topic"), output["key"].cast("string").alias("out_key"),
                      output["value"].cast("string").alias("out_value"))
    condition = F.col("rule") == F.lit(rule.state_key)
    if spec.having:
        condition = condition & F.expr(spec.having)
    return F.when(condition, record)


# A column of the output that reads every fold: the optimizer drops aggregates nothing reads,
# which changed the state's schema with the rules, and a restart on the checkpoint failed.
GUARD = "out_window_folds"


def _every_fold() -> Column:
    folds = [COUNT_ALL, TENANT, *(fold_column(fold, slot) for slot in range(SLOTS) for fold in FOLDS)]
    return F.array(*(F.col(name).isNull() for name in folds)).alias(GUARD)


def window_outputs(events: DataFrame, rules: Sequence[ActiveRule], lateness_ms: int) -> DataFrame:
    """The window rules' output events, as the stateful processor's EMIT rows."""
    closed = aggregated(window_rows(events, rules, lateness_ms))
    most_keys = max((len(rule.compiled.partition_key) for rule in rules), default=0)
    closed = closed.select("*", *(F.get_json_object("key", f"$[{i}]").alias(f"{KEY}{i}") for i in range(most_keys)))
    if not rules:
        nothing = F.lit(None).cast("string")
        return closed.where(F.lit(False)).select(
            F.lit(EMIT).alias("out_kind"), nothing.alias("out_rule"), nothing.alias("out_topic"),
            nothing.alias("out_key"), nothing.alias("out_value"), F.lit(1).cast("long").alias("out_count"),
            _every_fold())
    # One projection over the one aggregation: a union of projections (as for the filters)
    # would copy the aggregation, each copy a stateful operator of its own, their number
    # following the rules. Each record is NULL but for its own rule's windows that pass HAVING.
    record = F.coalesce(*map(_record, rules))
    return closed.select("rule", record.alias("r"), _every_fold()).where(F.col("r").isNotNull()).select(
        F.lit(EMIT).alias("out_kind"), F.col("rule").alias("out_rule"), "r.out_topic", "r.out_key",
        "r.out_value", F.lit(1).cast("long").alias("out_count"), GUARD)


__all__ = ["GUARD", "aggregated", "key_column", "key_json", "window_outputs", "window_rows"]
