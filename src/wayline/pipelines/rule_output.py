"""A rule's output events as Kafka records, built in the JVM: shared by the filters of the
rules job (``wayline.pipelines.rules_filters``) and the join queries (``wayline.pipelines.joins``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from wayline.rules.engine import OUTPUT_SOURCE_PREFIX, ActiveRule

# Timestamps inside ``data`` (an aggregate's MAX(time), say), to the microsecond with the offset.
_DATA_TIME = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def iso_time(column: Column) -> Column:
    """Python's ``isoformat`` of a UTC time (no fraction when whole), as the rules that run
    in Python write an output event's ``time``: one format for every kind of rule."""
    whole = F.unix_micros(column) % F.lit(1_000_000) == F.lit(0)
    return F.when(whole, F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss'Z'")).otherwise(
        F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"))


def output_record(rule: ActiveRule, select: Sequence[tuple[str, str]], origin: Column, subject: Column,
                  time: Column, tenant: Column) -> Column:
    """A rule's output as a Kafka record (topic, rule, key, value: the CloudEvent), built in
    the JVM; its id derives from the rule's state key and ``origin``, what produced it (for
    a window: its key and start, as the Python path derives it)."""
    event = F.struct(
        F.lit("1.0").alias("specversion"),
        F.substring(F.sha2(F.concat(F.lit(rule.state_key + "\x1f"), origin), 256), 1, 32).alias("id"),
        F.lit(OUTPUT_SOURCE_PREFIX + rule.name).alias("source"),
        F.lit(rule.output_type).alias("type"),
        F.lit("application/json").alias("datacontenttype"),
        subject.alias("subject"),
        iso_time(time).alias("time"),
        tenant.alias("tenantid"),
        F.struct(*(F.expr(expression).alias(name) for name, expression in select)).alias("data"),
    )
    return F.struct(
        F.lit(rule.output_topic).alias("topic"),
        F.lit(rule.state_key).alias("rule"),
        subject.cast("binary").alias("key"),
        F.to_json(event, {"timestampFormat": _DATA_TIME}).cast("binary").alias("value"),
    )


__all__ = ["iso_time", "output_record"]
