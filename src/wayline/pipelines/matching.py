"""Events × registry snapshot → each event's subscriptions, with three broadcast lookups.

Each event looks itself up under three keys — (type, tenant, sub-tenant),
(type, tenant, `*`) and (type, `*`, `*`) — in the snapshot's match table, one row per
key holding every subscription that key covers. A left broadcast join per level keeps
one row per event, so an event and all its subscriptions stay on one row: a micro-batch
counts what it filtered without a second pass. The content filters then run as one
`CASE filter_id` Column over the candidates, each distinct filter compiled once; no
per-row Python anywhere.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from wayline.delivery.batch import DEFAULT_MAX_COUNT, DEFAULT_MAX_WAIT
from wayline.pipelines.filter_column import to_column
from wayline.registry.snapshot import ANY, Snapshot

ROUTE_FIELDS = ("subscription_id", "endpoint_id", "mode", "max_count", "max_wait_ms")
CANDIDATE_TYPE = (
    "struct<subscription_id:string, endpoint_id:string, mode:string, max_count:int, max_wait_ms:int, filter_id:int>"
)
_CANDIDATE_ARROW = pa.struct([
    ("subscription_id", pa.string()), ("endpoint_id", pa.string()), ("mode", pa.string()), ("max_count", pa.int32()),
    ("max_wait_ms", pa.int32()), ("filter_id", pa.int32()),
])
_MATCH_TABLE_ARROW = pa.schema([
    ("event_type", pa.string()), ("tenant_key", pa.string()), ("subtenant_key", pa.string()),
    ("candidates", pa.list_(_CANDIDATE_ARROW)),
])
_LEVELS = (("tenantid", "subtenantid"), ("tenantid", None), (None, None))


def match_table_frame(spark: SparkSession, snapshot: Snapshot) -> DataFrame:
    """The snapshot's match table as a small DataFrame, to be broadcast: per match key,
    every subscription it covers with its route (endpoint, mode, batch limits) and filter.

    Made from Arrow, so Spark holds it as local rows in the JVM: broadcasting it in every
    micro-batch reads no Python (a frame made from Python rows is a Python RDD, and each
    broadcast of it would start a Python worker to decode them)."""
    default_wait_ms = round(DEFAULT_MAX_WAIT.total_seconds() * 1000)
    candidates: dict[tuple[str, str, str], list[dict[str, object]]] = defaultdict(list)
    for event_type, tenant_key, subtenant_key, subscription_id, filter_id in snapshot.match_keys():
        s = snapshot.subscriptions[subscription_id]
        candidates[(event_type, tenant_key, subtenant_key)].append({
            "subscription_id": s.id, "endpoint_id": s.endpoint_id, "mode": s.mode,
            "max_count": s.max_count or DEFAULT_MAX_COUNT, "max_wait_ms": s.max_wait_ms or default_wait_ms,
            "filter_id": filter_id,
        })
    keys = sorted(candidates)
    table = pa.Table.from_pydict({
        "event_type": [k[0] for k in keys], "tenant_key": [k[1] for k in keys], "subtenant_key": [k[2] for k in keys],
        "candidates": [sorted(candidates[k], key=lambda c: str(c["subscription_id"])) for k in keys],
    }, schema=_MATCH_TABLE_ARROW)
    return spark.createDataFrame(table)


def passes_filter(snapshot: Snapshot, filter_id: Column) -> Column:
    passes = F.when(filter_id.isNull(), F.lit(True))
    for number, compiled in sorted(snapshot.filters.items()):
        passes = passes.when(filter_id == F.lit(number), to_column(compiled))
    return passes.otherwise(F.lit(False))


def routes_column(snapshot: Snapshot) -> Column:
    """The routes of every subscription that delivers a row's event (after filters), over
    the three lookups' ``_m{level}_candidates``; make it once per snapshot (lambda
    variables are named afresh per Column, and differently named code compiles again)."""
    found = [F.coalesce(F.col(f"_m{level}_candidates"), F.array().cast(f"array<{CANDIDATE_TYPE}>"))
             for level in range(len(_LEVELS))]
    wanted = F.filter(F.concat(*found), lambda c: passes_filter(snapshot, c["filter_id"]))
    return F.transform(wanted, lambda c: F.struct(*(c[name].alias(name) for name in ROUTE_FIELDS)))


def with_subscriptions(events: DataFrame, table: DataFrame, routes: Column) -> DataFrame:
    """``events`` (one row each, kept) plus ``subscriptions``: an array of the routes
    (:data:`ROUTE_FIELDS`) of every subscription the snapshot delivers the event to,
    empty for an event no subscription wants or a row that is not an event; ``routes``
    is the snapshot's :func:`routes_column`."""
    for level, (tenant, subtenant) in enumerate(_LEVELS):
        keys = F.broadcast(table.select(
            *(F.col(c).alias(f"_m{level}_{c}") for c in ("event_type", "tenant_key", "subtenant_key", "candidates"))
        ))
        events = events.join(
            keys,
            (events["type"] == keys[f"_m{level}_event_type"])
            & ((F.col(tenant) if tenant else F.lit(ANY)) == keys[f"_m{level}_tenant_key"])
            & ((F.col(subtenant) if subtenant else F.lit(ANY)) == keys[f"_m{level}_subtenant_key"]),
            "left",
        ).drop(f"_m{level}_event_type", f"_m{level}_tenant_key", f"_m{level}_subtenant_key")
    return events.select("*", routes.alias("subscriptions")).drop(*(f"_m{level}_candidates" for level in range(3)))


def match_events(events: DataFrame, table: DataFrame, snapshot: Snapshot) -> DataFrame:
    """Every (event, subscription) pair the snapshot delivers: the event's columns plus
    the route's (:data:`ROUTE_FIELDS`)."""
    matched = with_subscriptions(events, table, routes_column(snapshot))
    return matched.select(*events.columns, F.explode("subscriptions").alias("_route")).select(
        *events.columns, *(F.col(f"_route.{name}").alias(name) for name in ROUTE_FIELDS),
    )


__all__ = [
    "CANDIDATE_TYPE", "ROUTE_FIELDS", "match_events", "match_table_frame", "passes_filter",
    "routes_column", "with_subscriptions",
]
