"""The filter (stateless) rules of a rules micro-batch, run in the JVM: every filter's
output records, from the events the batch holds, as Spark SQL the rule compiled to."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from wayline.pipelines.rule_output import output_record
from wayline.pipelines.windows import key_column
from wayline.rules.engine import ActiveRule


def _record(rule: ActiveRule) -> Column:
    """One filter rule's output record for the current event, NULL where it does not pass."""
    spec = rule.compiled.filter
    assert spec is not None
    key_parts = rule.compiled.partition_key
    subject = F.concat_ws("/", *(F.coalesce(key_column(p), F.lit("")) for p in key_parts)) if key_parts else F.col("subject")
    record = output_record(rule, spec.select, F.col("id"), subject, F.col("event_time"), F.col("tenantid"))
    return F.when(F.expr(spec.where), record) if spec.where else record


# Filters per projection. The code Spark generates for one projection of every filter's
# record outgrew the JVM's 64 KB method limit at the 100-rule mix (see
# docs/benchmarks.md#second-pass-profile-changes-beforeafter): Spark then gave
# up whole-stage code generation for the plan, after trying to compile it again in every
# micro-batch, and ran it interpreted. A dozen filters stay well under the limit.
FILTERS_PER_PROJECTION = 12


def filters_output(events: DataFrame, rules: Sequence[ActiveRule]) -> DataFrame:
    """Every filter's output as Kafka records (topic, rule, key, value), in the JVM.

    One projection per dozen filters, unioned: not one plan per filter, since a union of 70
    plans overflowed the analyzer's stack (bench/rules.py, 100 rules).
    """
    outputs = []
    for start in range(0, len(rules), FILTERS_PER_PROJECTION):
        chunk = rules[start:start + FILTERS_PER_PROJECTION]
        passing = events
        wheres = [rule.compiled.filter.where for rule in chunk]  # type: ignore[union-attr]
        if all(wheres):
            # Most events pass no filter: drop them before the array of every filter's
            # record is built and exploded, which cost far more than the conditions.
            passing = events.where(reduce(Column.__or__, (F.expr(where) for where in wheres)))
        # NULLs are dropped after the explode, not by ``filter(array, x -> x IS NOT NULL)``,
        # whose lambda Spark does not compile.
        records = passing.select(F.explode(F.array(*map(_record, chunk))).alias("r")).where(F.col("r").isNotNull())
        outputs.append(records.select("r.topic", "r.rule", "r.key", "r.value"))
    return reduce(DataFrame.unionByName, outputs)


__all__ = ["FILTERS_PER_PROJECTION", "filters_output"]
