"""The rules job's query, fixed while it runs::

    Kafka (all event topics) -> parse once -> watermark on event_time
      -> one row per event for the stateless rules, plus one per stateful partition key
         (``key_spec``: the partition-key columns of some window or pattern rule)
      -> ONE shuffle by (key_spec, shard)
         |- key_spec = '': the events, passed on untouched
         |- key_spec = '' again: the fixed window rules' streaming aggregation
         |  (``wayline.pipelines.windows``), in the JVM
         '- otherwise: transformWithStateInPandas keyed by (key_spec, shard) -> RulesProcessor
            (``wayline.pipelines.rules_processor``)
      -> union -> foreachBatch (``wayline.pipelines.rules_job``)

A shard is ``hash(partition key) % rules.shards``, numbered by the checkpoint's
``wayline.rules.shards.ShardLayout``: the operator's keys are few, each holds many partition
keys, and the tasks get as many each, because the Python stateful operator pays per key and
per state call (``docs/decisions.md``). Both branches read the same exchange, which Spark reuses, so
Kafka is read and the JSON parsed once per micro-batch — only if the optimizer leaves the
two exchanges identical: see ``rules_stream``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from wayline.core.settings import Settings
from wayline.pipelines.envelope import parse_events, valid_events
from wayline.pipelines.rules_processor import OUTPUT_SCHEMA, ROW_COLUMNS, RulesProcessor
from wayline.pipelines.source import read_kafka
from wayline.pipelines.windows import key_json, window_outputs
from wayline.rules.columns import EVENT_COLUMNS, parse_key
from wayline.rules.counters import EVENT
from wayline.rules.engine import OUTPUT_SOURCE_PREFIX, ActiveRule
from wayline.rules.shards import ShardLayout

PASS = ""  # the key_spec of the events passed to the stateless rules
# Both stateful operators (the Python processor and the window aggregation) take the
# query's one watermark. With Spark's default (a watermark per operator, from the
# EventTimeWatermark in its own subtree) the operator behind the ReusedExchange found
# none: it never closed a window, never fired a timer.
SINGLE_WATERMARK = ("spark.sql.streaming.statefulOperator.allowMultiple", "false")


def routed_events(events: DataFrame, key_specs: Sequence[str], layout: ShardLayout) -> DataFrame:
    """Each event once for the filters and once per stateful key spec, behind one shuffle."""
    routes = [F.struct(F.lit(PASS).alias("spec"), F.lit(None).cast("string").alias("key"))]
    for spec in key_specs:
        paths = [parse_key(text) for text in spec.split(",")]
        routes.append(F.struct(F.lit(spec).alias("spec"), key_json(paths).alias("key")))
    exploded = events.select("*", F.explode(F.array(*routes)).alias("_route"))
    spec, key = F.col("_route.spec"), F.col("_route.key")
    # Passed-on events spread by id; keyed copies by their partition key, so one key's
    # events meet in one group.
    nth = F.pmod(F.xxhash64(F.when(spec == F.lit(PASS), F.col("id")).otherwise(key)), F.lit(layout.shards))
    return exploded.select(
        *events.columns, spec.alias("key_spec"), key.alias("key_value"),
        _shard(nth, spec, [PASS, *key_specs], layout).alias("shard"),
    ).repartition(layout.partitions, "key_spec", "shard")


def _shard(nth: Column, spec: Column, specs: Sequence[str], layout: ShardLayout) -> Column:
    """The ``nth`` shard's value for the row's key spec, as the layout numbers them."""
    if not layout.balanced:
        return nth.cast("int")
    values = F.when(spec == F.lit(specs[0]), F.array(*map(F.lit, layout.values(specs[0]))))
    for other in specs[1:]:
        values = values.when(spec == F.lit(other), F.array(*map(F.lit, layout.values(other))))
    return F.element_at(values, (nth + 1).cast("int"))


def _branch(routed: DataFrame, stateful: bool) -> DataFrame:
    """One side of the exchange: the passed events, or the rows for the stateful operator.

    Spark reuses an exchange only when both readers' plans below it are identical. Left to
    itself the optimizer pushes each side's filter on ``key_spec`` and its own column
    pruning below the shuffle, which makes two different exchanges, each with its own
    Kafka scan and JSON parse. So the condition is wrapped in a non-deterministic
    expression, which the optimizer never moves (it is still true on every row), and both
    sides keep every routed column.
    """
    condition = F.col("key_spec") != F.lit(PASS) if stateful else F.col("key_spec") == F.lit(PASS)
    pinned = F.when(F.spark_partition_id() >= F.lit(0), condition)
    return routed.where(pinned)


def _reading_every_column(branch: DataFrame) -> DataFrame:
    """The branch with a ``tenantid`` that reads every routed column (in a branch never taken).

    The window aggregation uses a few columns; the optimizer pruned the others below the
    shuffle, which made an exchange of its own for this branch and a second read of Kafka
    per micro-batch (the input rows counted twice in the query's progress)."""
    never = F.to_json(F.struct(*branch.columns))
    return branch.withColumn("tenantid", F.when(F.spark_partition_id() >= F.lit(0), F.col("tenantid")).otherwise(never))


def rules_stream(spark: SparkSession, settings: Settings, key_specs: Sequence[str], dsn: str,
                 layout: ShardLayout, windows: Sequence[ActiveRule] = ()) -> DataFrame:
    events = valid_events(parse_events(read_kafka(spark, settings), settings.envelope))
    # The rules' own output is an event stream too; reading it back could loop forever.
    events = events.where(~F.startswith(F.col("source"), F.lit(OUTPUT_SOURCE_PREFIX)))
    lateness_ms = int(settings.rules.allowed_lateness_s * 1000)
    events = events.withWatermark("event_time", f"{lateness_ms} milliseconds")
    events = events.select(*EVENT_COLUMNS)
    routed = routed_events(events, key_specs, layout)
    # The passed side carries the route's key columns too (unused downstream), so that both
    # sides read the same columns from the exchange.
    passed = _branch(routed, stateful=False).select(
        F.lit(EVENT).alias("out_kind"), *EVENT_COLUMNS, "key_spec", "key_value", "shard",
    )
    # The stateful branch is there even before any stateful rule: a restart may then add
    # routes (a stateless change) but never a stateful operator the checkpoint lacks.
    stateful = _branch(routed, stateful=True).select(
        "key_spec", "shard", "key_value", F.to_json("data").alias("data_json"), *ROW_COLUMNS,
    ).groupBy("key_spec", "shard").transformWithStateInPandas(
        statefulProcessor=RulesProcessor(dsn),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    # The fixed window rules aggregate the passed side's events in the JVM
    # (wayline.pipelines.windows), behind a ReusedExchange: see SINGLE_WATERMARK.
    windowed = window_outputs(_reading_every_column(_branch(routed, stateful=False)), windows, lateness_ms)
    # Stateful side first: Spark keeps the exchange where it first meets it and makes the
    # other reader a ReusedExchange. The stateful operator learns its watermark from the
    # EventTimeWatermark below it in its own subtree; behind a ReusedExchange it found
    # none, and its timers never fired.
    return stateful.unionByName(passed, allowMissingColumns=True).unionByName(windowed, allowMissingColumns=True)


__all__ = ["SINGLE_WATERMARK", "routed_events", "rules_stream"]
