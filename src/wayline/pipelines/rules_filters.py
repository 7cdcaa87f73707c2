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


class FilterOutputs:
    """Every filter's output as Kafka records (topic, rule, key, value), in the JVM: the
    Columns made once for a rule set, applied to each micro-batch's events.

    Made per micro-batch, the Columns of 70 filters were some thousand py4j calls, the
    largest item of a steady micro-batch at the 100-rule mix (docs/benchmarks.md, "Fixed
    costs out of the micro-batch", 2026-11-28); a Column is an unresolved expression that any frame with the events'
    columns can take.

    One projection per dozen filters, unioned: not one plan per filter, since a union of 70
    plans overflowed the analyzer's stack (bench/rules.py, 100 rules).
    """

    def __init__(self, rules: Sequence[ActiveRule]) -> None:
        self._chunks = [_chunk(rules[start:start + FILTERS_PER_PROJECTION])
                        for start in range(0, len(rules), FILTERS_PER_PROJECTION)]

    def of(self, events: DataFrame) -> DataFrame:
        outputs = []
        for passes, records in self._chunks:
            passing = events.where(passes) if passes is not None else events
            # NULLs are dropped after the explode, not by ``filter(array, x -> x IS NOT NULL)``,
            # whose lambda Spark does not compile.
            exploded = passing.select(F.explode(records).alias("r")).where(F.col("r").isNotNull())
            outputs.append(exploded.select("r.topic", "r.rule", "r.key", "r.value"))
        return reduce(DataFrame.unionByName, outputs)


def _chunk(rules: Sequence[ActiveRule]) -> tuple[Column | None, Column]:
    """One projection's filters: the condition an event must meet to pass any of them (None:
    every event may), and the array of their records."""
    wheres = [rule.compiled.filter.where for rule in rules]  # type: ignore[union-attr]
    # Most events pass no filter: drop them before the array of every filter's record is
    # built and exploded, which cost far more than the conditions.
    passes = reduce(Column.__or__, (F.expr(where) for where in wheres)) if all(wheres) else None
    return passes, F.array(*map(_record, rules))


def filters_output(events: DataFrame, rules: Sequence[ActiveRule]) -> DataFrame:
    """The filters' output records once, without keeping their Columns."""
    return FilterOutputs(rules).of(events)


__all__ = ["FILTERS_PER_PROJECTION", "FilterOutputs", "filters_output"]
