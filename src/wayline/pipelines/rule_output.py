"""A rule's output events as Kafka records, built in the JVM: shared by the filters of the
rules job (``wayline.pipelines.rules``) and the join queries (``wayline.pipelines.joins``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from wayline.rules.engine import OUTPUT_SOURCE_PREFIX, ActiveRule


def output_record(rule: ActiveRule, select: Sequence[tuple[str, str]], origin: Column, subject: Column,
                  time: Column, tenant: Column) -> Column:
    """A rule's output as a Kafka record (topic, rule, key, value: the CloudEvent), built in
    the JVM; its id derives from the rule's state key and ``origin``, what produced it."""
    event = F.struct(
        F.lit("1.0").alias("specversion"),
        F.substring(F.sha2(F.concat(F.lit(rule.state_key + "\x1f"), origin), 256), 1, 32).alias("id"),
        F.lit(OUTPUT_SOURCE_PREFIX + rule.name).alias("source"),
        F.lit(rule.output_type).alias("type"),
        F.lit("application/json").alias("datacontenttype"),
        subject.alias("subject"),
        F.date_format(time, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("time"),
        tenant.alias("tenantid"),
        F.struct(*(F.expr(expression).alias(name) for name, expression in select)).alias("data"),
    )
    return F.struct(
        F.lit(rule.output_topic).alias("topic"),
        F.lit(rule.state_key).alias("rule"),
        subject.cast("binary").alias("key"),
        F.to_json(event).cast("binary").alias("value"),
    )


__all__ = ["output_record"]
