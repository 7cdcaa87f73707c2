"""One pass over a delivery micro-batch: every Kafka record → the work it makes, in one Spark job.

Per record, in the JVM: parse it (:mod:`~wayline.pipelines.envelope`), look up its
subscriptions (:mod:`~wayline.pipelines.matching`, the registry's routing table) and turn it into work rows
(:data:`~wayline.pipelines.sending.WORK_SCHEMA`):

- a bad record: one ``record`` row, its quarantine copy;
- a valid event no subscription wants: one ``filtered`` row;
- a valid event: one row per subscription — a ``single`` request in streaming mode; in
  batch mode a pair, cut into ``batch`` requests and bundle ``record`` rows per
  (subscription, shard) by :func:`~wayline.pipelines.batching.batch_work`;
- with ``audit.enabled``, ``audit`` rows: the self-audit's records
  (:mod:`wayline.delivery.audit`) — a consumed record per pair and per quarantined
  record, and the quarantined record's outcome (a pair's outcome comes from the task that
  settles it); a filtered event writes none, its count is the batch's.

An event's first row carries ``events = 1``, so the tasks' counts add up to the
micro-batch's without a pass of their own.

With ``delivery.engine = "senders"`` the same units are the matching query's output
instead (:func:`work_records`): each becomes the Kafka record it makes, requests for the
sender processes among them, in one projection with no shuffle
(:mod:`~wayline.pipelines.matching_job`).

In the micro-batch engine, every row is hash-partitioned by endpoint once. Streaming rows go from that shuffle
straight to the sending tasks; batch-mode pairs are grouped from the same shuffle (their
grouping includes the endpoint, so Spark adds no second exchange, and reuses the first
for both branches). Both meet in one ``mapInArrow`` (:func:`~wayline.pipelines.sending.send`),
whose collect is the micro-batch's one Spark job. Rows without an endpoint
(filtered events, quarantine copies and their audit records) share one task; they cost
only a count or a Kafka write.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from wayline.core.settings import Settings
from wayline.delivery import audit, work
from wayline.delivery.bucket import Source
from wayline.pipelines.batching import batch_work
from wayline.pipelines.envelope import CLOCK, event_body, parse_events, quarantine_copy
from wayline.pipelines.live_snapshot import BATCH, LiveSnapshot
from wayline.pipelines.matching import with_subscriptions

_PAIR = work.PAIR  # a batch-mode (event, subscription) before it is cut into chunks
_UNIT_FIELDS = (
    ("kind", "string"), ("subscription_id", "string"), ("endpoint_id", "string"), ("max_count", "int"),
    ("max_wait_ms", "int"), ("event_id", "string"), ("body", "binary"), ("topic", "string"), ("key", "binary"),
    ("headers", "array<struct<key:string,value:binary>>"), ("reason", "string"), ("events", "int"),
    ("source", "string"), ("partition", "int"), ("offset", "long"), ("version", "long"),
)


def _unit(**values: Column) -> Column:
    """One work unit of a record, every field typed (NULL where not given), so the
    branches of a record's units share one type."""
    return F.struct(*(values.get(name, F.lit(None)).cast(kind).alias(name) for name, kind in _UNIT_FIELDS))


_AT = "_at"
"""A routed record's clock as the self-audit's records carry it (made once per record)."""


def _audit(kind: str, record: Column, topic: str, outcome: str | None = None,
           endpoint_id: Column | None = None) -> Column:
    """A unit that writes one self-audit record (:mod:`wayline.delivery.audit`, as the
    tasks build them for pairs) for the record being routed; with ``endpoint_id``, it goes
    to that endpoint's task, so the audit's writes spread as the sends do."""
    at = F.col(_AT)
    data = F.struct(record.alias("record"), F.col("id").alias("event_id"), at.alias("event_time"),
                    F.col("topic").alias("topic"), F.lit(outcome).alias("outcome"))
    value = F.to_json(F.struct(
        F.lit("1.0").alias("specversion"),
        F.concat(F.lit(f"{kind}:"), record, F.lit(f":{outcome}" if outcome else "")).alias("id"),
        F.lit(audit.SOURCE).alias("source"), F.lit(audit.event_type(kind)).alias("type"),
        F.lit(audit.TENANT).alias("tenantid"), at.alias("time"), data.alias("data"),
    ))
    return _unit(kind=F.lit("audit"), topic=F.lit(topic), key=record, body=value,
                 **({} if endpoint_id is None else {"endpoint_id": endpoint_id}))


def routed(batch: DataFrame, routes: Column, settings: Settings, *, real_time: bool = False) -> DataFrame:
    """Each record of ``batch`` (the Kafka source's columns) parsed and routed by ``routes``
    (a :func:`~wayline.pipelines.matching.routing`), one row per record: what
    :func:`units` turns into work, and what the matching query counts; under the
    ``real_time`` trigger, on each record's own clock (:func:`~wayline.pipelines.envelope.batch_micros`)."""
    parsed = parse_events(batch, settings.envelope, per_record=real_time)
    body = F.when(F.col("reason").isNull(), event_body())
    matched = with_subscriptions(parsed.select("*", body.alias("_body")), routes)
    if not settings.audit.enabled:
        return matched
    # Formatted once per record that writes self-audit records (each has the time twice),
    # not per record: most events are filtered and write none.
    writes_audit = F.col("reason").isNotNull() | (F.size("subscriptions") > 0)
    at = F.when(writes_audit, F.date_format(F.timestamp_micros(F.col(CLOCK)), "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"))
    return matched.select("*", at.alias(_AT))


def units(matched: DataFrame, settings: Settings) -> DataFrame:
    """Each record of ``matched`` (a :func:`routed`) as its work units, one row each."""
    checked = settings.audit
    made = _units(settings.kafka.quarantine_topic, settings.kafka.quarantine_max_bytes,
                  checked.consumed_topic if checked.enabled else None, checked.outcomes_topic)
    return matched.select(F.explode(made).alias("unit")).select("unit.*")


def work_rows(batch: DataFrame, routes: Column, settings: Settings, *, real_time: bool = False) -> DataFrame:
    """Each record of ``batch`` (the Kafka source's columns) as its work units, one row
    each, routed by ``routes`` (a :func:`~wayline.pipelines.matching.routing`): :func:`units`
    of :func:`routed`."""
    return units(routed(batch, routes, settings, real_time=real_time), settings)


@functools.cache
def _units(quarantine_topic: str, quarantine_max_bytes: int, consumed_topic: str | None,
           outcomes_topic: str) -> Column:
    """A routed record's units (made once: see ``envelope._parse_steps``); with no
    ``consumed_topic``, no self-audit records."""
    copy = quarantine_copy(quarantine_topic, quarantine_max_bytes)
    copied = _unit(kind=F.lit("record"), topic=copy["topic"], key=copy["key"], body=copy["value"],
                   headers=copy["headers"], reason=F.col("reason"))
    record = F.concat_ws("/", "topic", "partition", "offset")
    quarantined = F.array(copied) if consumed_topic is None else F.array(
        copied, _audit(audit.CONSUMED, record, consumed_topic),
        _audit(audit.OUTCOMES, record, outcomes_topic, audit.QUARANTINED))
    filtered = F.array(_unit(kind=F.lit("filtered"), events=F.lit(1)))

    def pair(route: Column, position: Column) -> Column:
        unit = _unit(
            kind=F.when(route["mode"] == F.lit(BATCH), F.lit(_PAIR)).otherwise(F.lit("single")),
            subscription_id=route["subscription_id"], endpoint_id=route["endpoint_id"],
            max_count=route["max_count"], max_wait_ms=route["max_wait_ms"], event_id=F.col("id"),
            body=F.col("_body"), events=(position == 0).cast("int"), source=F.col("topic"),
            partition=F.col("partition"), offset=F.col("offset"), version=F.col("registry_version"),
        )
        if consumed_topic is None:
            return F.array(unit)
        record = F.concat_ws("/", route["subscription_id"], F.col("id"))
        return F.array(unit, _audit(audit.CONSUMED, record, consumed_topic, endpoint_id=route["endpoint_id"]))

    return (
        F.when(F.col("reason").isNotNull(), quarantined)
        # No audit records: a filtered event's outcome is decided in this very projection;
        # pairing it proved only that Kafka kept both writes, and made the audit's volume
        # follow every event read (docs/decisions.md, "The self-audit follows what leaves
        # the projection").
        .when(F.size("subscriptions") == 0, filtered)
        .otherwise(F.flatten(F.transform("subscriptions", pair)))
    )


def work_records(units: DataFrame, settings: Settings) -> DataFrame:
    """The matching query's output (``delivery.engine = "senders"``): each of ``work_rows``'
    units as the Kafka record it makes — ``topic``, ``key``, ``value``, ``headers`` — in
    one projection, no shuffle. A ``single`` request and a batch-mode ``pair`` go to
    ``delivery.work_topic`` in the format of :mod:`wayline.delivery.work`, keyed by
    endpoint, the registry version that routed them in their headers: the sender processes send the
    first and gather the second into batches. Quarantine copies and self-audit records
    go as the sending tasks write them. A filtered event writes nothing."""
    request = F.col("kind").isin(work.SINGLE, _PAIR)
    fields = {work.KIND: F.col("kind"), work.SUBSCRIPTION: F.col("subscription_id"),
              work.ENDPOINT: F.col("endpoint_id"), work.EVENT: F.col("event_id"), work.SOURCE: F.col("source"),
              work.VERSION: F.col("version").cast("string")}
    headers = F.array(*(F.struct(F.lit(name).alias("key"), fields[name].cast("binary").alias("value"))
                        for name in work.HEADERS))
    return units.where(F.col("kind") != F.lit("filtered")).select(
        F.when(request, F.lit(settings.delivery.work_topic)).otherwise(F.col("topic")).alias("topic"),
        F.when(request, F.col("endpoint_id").cast("binary")).otherwise(F.col("key")).alias("key"),
        F.col("body").alias("value"),
        F.when(request, headers).otherwise(F.col("headers")).alias("headers"),
    )


def micro_batch_work(batch: DataFrame, live: LiveSnapshot, settings: Settings, source: Source) -> DataFrame:
    """Every work row of a micro-batch, partitioned by endpoint for the sending tasks."""
    delivery = settings.delivery
    # One task per core before the shuffle, not one per Kafka partition: hundreds of tiny
    # tasks cost more than the work itself.
    units = work_rows(batch.coalesce(batch.sparkSession.sparkContext.defaultParallelism), live.routes, settings)
    shuffled = units.repartition(delivery.send_partitions, "endpoint_id")
    direct = shuffled.where(F.col("kind") != F.lit(_PAIR)).select(
        "kind", "subscription_id", "endpoint_id",
        F.when(F.col("kind") == F.lit("single"), F.array("event_id")).alias("event_ids"),
        "body", "topic", "key", "headers", "reason", "events", "source",
    )
    if not live.has_batch:
        return direct
    pairs = shuffled.where(F.col("kind") == F.lit(_PAIR))
    return direct.unionByName(batch_work(pairs, delivery.batch_shards, delivery.batch_topic, source),
                              allowMissingColumns=True)


__all__ = ["micro_batch_work", "routed", "units", "work_records", "work_rows"]
