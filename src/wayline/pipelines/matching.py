"""Events × registry → each event's subscriptions, by ``wayline_routes`` in the JVM.

The routes come from the JVM function ``wayline_routes`` (``jvm/src/main/java/dev/wayline/
routing``, built into ``jars/spark`` by ``make jars``): per event, its three match keys —
(type, tenant, sub-tenant), (type, tenant, ``*``) and (type, ``*``, ``*``) — looked up in a
routing table (:mod:`wayline.delivery.routing_table`), and each candidate's content filter
evaluated, in the executors, with no per-row Python. The table is a file the driver
publishes, not part of the plan: a query that follows the folder (:func:`routing`) routes
with a new registry version within a second of its publication, with no new plan and no
restart (docs/decisions.md, "The routing table out of the matching plan").

One row per event: an event and all its subscriptions stay on one row, so a micro-batch
counts what it filtered without a second pass.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

ROUTES_FUNCTION = "wayline_routes"
_ROUTES_CLASS = "dev.wayline.routing.Routes"
ROUTE_FIELDS = ("subscription_id", "endpoint_id", "mode", "max_count", "max_wait_ms")
ROUTE_TYPE = "struct<subscription_id:string, endpoint_id:string, mode:string, max_count:int, max_wait_ms:int>"
EVENT_FIELDS = ("id", "source", "type", "subject", "tenantid", "subtenantid", "time", "data")
"""The event's columns as ``wayline_routes`` reads them, in this order (``FieldPath`` there)."""
FOLLOW = -1
"""The version :func:`routing` routes with to follow the folder's ``CURRENT``."""
RELOAD_S = 1.0
"""How often, at most, a following task looks at ``CURRENT`` again (``TableSource.CHECK_NANOS``)."""


def _register(spark: SparkSession) -> None:
    """Make ``wayline_routes`` callable in ``spark``: a function is its session's, and a
    micro-batch's session may be a new one."""
    spark.udf.registerJavaFunction(ROUTES_FUNCTION, _ROUTES_CLASS, f"struct<version:bigint, routes:array<{ROUTE_TYPE}>>")


def routing(folder: Path, version: int = FOLLOW) -> Column:
    """Per event (the envelope's columns), ``struct<version, routes>``: the routes of every
    subscription that delivers it (:data:`ROUTE_FIELDS`, its filter passed; empty for an
    event no subscription wants or a row that is not an event) and the registry version they
    come from, by the table of ``version`` in ``folder`` or, with :data:`FOLLOW`, the one its
    ``CURRENT`` names at the time."""
    event = F.struct(*((F.unix_micros("time") if name == "time" else F.col(name)).alias(name)
                       for name in EVENT_FIELDS))
    return F.call_function(ROUTES_FUNCTION, F.lit(str(folder.resolve())), F.lit(version).cast("bigint"), event)


def with_subscriptions(events: DataFrame, routes: Column) -> DataFrame:
    """``events`` (one row each, kept) plus ``subscriptions``, an array of routes, and
    ``registry_version``, from ``routes`` (a :func:`routing`)."""
    _register(events.sparkSession)
    return events.select("*", routes.alias("_routed")).select(
        *events.columns, F.col("_routed.routes").alias("subscriptions"),
        F.col("_routed.version").alias("registry_version"),
    )


def match_events(events: DataFrame, routes: Column) -> DataFrame:
    """Every (event, subscription) pair ``routes`` delivers: the event's columns plus the
    route's (:data:`ROUTE_FIELDS`)."""
    matched = with_subscriptions(events, routes)
    return matched.select(*events.columns, F.explode("subscriptions").alias("_route")).select(
        *events.columns, *(F.col(f"_route.{name}").alias(name) for name in ROUTE_FIELDS),
    )


__all__ = [
    "EVENT_FIELDS", "FOLLOW", "RELOAD_S", "ROUTES_FUNCTION", "ROUTE_FIELDS", "ROUTE_TYPE", "match_events",
    "routing", "with_subscriptions",
]
