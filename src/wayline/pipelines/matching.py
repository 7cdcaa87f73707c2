"""Events × registry snapshot → (event, subscription) pairs, as one broadcast hash join.

Each event looks itself up under three keys — (type, tenant, sub-tenant),
(type, tenant, `*`) and (type, `*`, `*`) — in the snapshot's table of match keys, so
every subscription level is an exact equi-join with no per-row Python; the content
filters then run as one `CASE filter_id` Column, each distinct filter compiled once.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from wayline.pipelines.filter_column import to_column
from wayline.registry.snapshot import ANY, Snapshot

MATCH_KEYS_SCHEMA = "event_type string, tenant_key string, subtenant_key string, subscription_id string, filter_id int"


def match_keys_frame(spark: SparkSession, snapshot: Snapshot) -> DataFrame:
    """The snapshot's lookup table as a small DataFrame, to be broadcast."""
    return spark.createDataFrame(list(snapshot.match_keys()), MATCH_KEYS_SCHEMA)


def filter_column(snapshot: Snapshot) -> Column:
    passes = F.when(F.col("filter_id").isNull(), F.lit(True))
    for filter_id, compiled in sorted(snapshot.filters.items()):
        passes = passes.when(F.col("filter_id") == F.lit(filter_id), to_column(compiled))
    return passes.otherwise(F.lit(False))


def match_events(events: DataFrame, keys: DataFrame, snapshot: Snapshot) -> DataFrame:
    """Every (event, subscription) pair the snapshot delivers: the event's columns plus
    `subscription_id`. Events in no pair are the pipeline's "filtered" count."""
    lookups = events.select(
        "*",
        F.explode(F.array(
            F.struct(F.col("tenantid").alias("t"), F.col("subtenantid").alias("s")),
            F.struct(F.col("tenantid").alias("t"), F.lit(ANY).alias("s")),
            F.struct(F.lit(ANY).alias("t"), F.lit(ANY).alias("s")),
        )).alias("_lookup"),
    )
    matched = lookups.join(
        F.broadcast(keys),
        (lookups["type"] == keys["event_type"])
        & (lookups["_lookup.t"] == keys["tenant_key"])
        & (lookups["_lookup.s"] == keys["subtenant_key"]),
    )
    return matched.where(filter_column(snapshot)).drop(
        "_lookup", "event_type", "tenant_key", "subtenant_key", "filter_id"
    )


__all__ = ["MATCH_KEYS_SCHEMA", "filter_column", "match_events", "match_keys_frame"]
