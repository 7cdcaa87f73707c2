"""Kafka records → typed envelope columns, entirely as Spark SQL expressions (no Python UDF).

The rules are those of `wayline.core.envelope` (its docstring is the reference); this
module states them as JVM expressions so no row ever crosses into Python. The JSON is
parsed once, with `from_json` and a fixed schema whose `data` field is a VARIANT, so
rules and filters can read any `data.*` path without a per-type schema. The slower
checks (`try_parse_json`, `schema_of_variant`) run only for rows already known to be bad.

The clock an event's time is bounded by (``envelope.max_future_skew_s``) is
``current_timestamp()``: in a streaming plan, the micro-batch's own timestamp, kept in its
offset log, so a replayed micro-batch gives every record the verdict it had (inside
``foreachBatch``, the time the batch's job runs). It is read through :func:`batch_micros`,
which keeps it out of the generated code. Under the real-time trigger, whose batches last
minutes, each record's own reading time instead (``per_record``). It is read once per record,
in the first projection, and kept as ``clock_micros`` for whatever else needs the time a
record was judged at (the self-audit's records): ``reflect`` is evaluated without code
generation, and a stage holding it is not generated as a whole, so it stays in the one stage
that ``from_json`` (evaluated the same way) keeps out of whole-stage code anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from wayline.core.envelope import (
    BINARY_PREFIX,
    DETAIL_HEADER,
    DETAILS,
    EARLIEST_TIME,
    LATEST_TIME,
    REASON_HEADER,
    REQUIRED_ATTRIBUTES,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
    SPEC_VERSION,
    SUBTENANT,
    TENANT,
    TIME_PATTERN,
    TRUNCATED_HEADER,
    Reason,
    future_detail,
    missing_detail,
    oversize_detail,
)
from wayline.core.settings import EnvelopeSettings

_STRING_ATTRIBUTES = REQUIRED_ATTRIBUTES + (
    "subject", "time", "datacontenttype", "dataschema", TENANT, SUBTENANT,
)
ENVELOPE_SCHEMA = "struct<{}, data:variant>".format(
    ", ".join(f"{name}:string" for name in _STRING_ATTRIBUTES)
)
ENVELOPE_COLUMNS = (
    "id", "source", "type", "specversion", "subject", "time", "datacontenttype", "dataschema",
    TENANT, SUBTENANT, "data", "event_time",
)
CLOCK = "clock_micros"
"""The column :func:`parse_events` adds: the clock a record was judged by (:func:`batch_micros`)."""
KAFKA_COLUMNS = ("key", "value", "headers", "topic", "partition", "offset", "timestamp")


def _header(name: str) -> Column:
    matching = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(1))["value"].cast("string")


def _detail_of(reason: Column, size: Column, missing_names: Column, max_bytes: int,
               max_future_skew_s: float) -> Column:
    # Same texts as wayline.core.envelope builds; the parity test compares them.
    oversize_prefix, oversize_rest = oversize_detail(0, max_bytes).split("0", 1)
    detail = F.when(
        reason == Reason.OVERSIZE.value,
        F.concat(F.lit(oversize_prefix), size.cast("string"), F.lit(oversize_rest)),
    ).when(
        reason == Reason.MISSING_ATTRIBUTE.value,
        F.concat(F.lit(missing_detail([])), missing_names),
    ).when(reason == Reason.FUTURE_TIME.value, F.lit(future_detail(max_future_skew_s)))
    for fixed, text in DETAILS.items():
        detail = detail.when(reason == fixed.value, F.lit(text))
    return detail


def parse_events(kafka: DataFrame, envelope: EnvelopeSettings, *, per_record: bool = False) -> DataFrame:
    """Add the envelope columns, :data:`CLOCK` and, for records that are not events, `reason`
    and `detail`.

    `kafka` has the Kafka source's columns (read with `includeHeaders=true`). Good rows
    have `reason` NULL; bad rows keep their original key, value and headers intact.
    """
    frame = kafka
    for step in _parse_steps(envelope.max_bytes, envelope.max_future_skew_s, per_record):
        frame = step(frame)
    return frame


@functools.cache
def _parse_steps(max_bytes: int, max_future_skew_s: float, per_record: bool,
                 ) -> tuple[Callable[[DataFrame], DataFrame], ...]:
    """The parse as steps over a frame, its Columns made once per process: a Column's
    lambda variables are named afresh each time one is made, and generated code that
    differs by those names is compiled again — every micro-batch, if made per micro-batch."""
    text = F.col("value").cast("string")
    size = F.coalesce(F.octet_length("value"), F.lit(0))
    binary = F.col("_binary")

    def attribute(name: str) -> Column:
        raw = F.when(binary, _header(BINARY_PREFIX + name)).otherwise(F.col(f"_json_{name}"))
        return F.when(raw != F.lit(""), raw)

    # The parsed struct comes out of a generator (`inline_outer` of a one-element array)
    # because a generator is a fence for the optimizer: a later filter on `reason` would
    # otherwise be pushed below this projection with `from_json` copied into every
    # attribute it reads, a much slower parse (see docs/benchmarks.md#envelope-parsing-issue-2--2026-11-22).
    staged = [
        *KAFKA_COLUMNS,
        size.alias("_size"),
        F.coalesce(F.exists("headers", lambda h: h["key"] == F.lit(f"{BINARY_PREFIX}specversion")), F.lit(False)).alias("_binary"),
        F.array(F.when(size.between(1, max_bytes), F.from_json(text, ENVELOPE_SCHEMA))).alias("_parsed"),
        batch_micros(per_record=per_record).alias(CLOCK),
    ]
    unpacked = [*KAFKA_COLUMNS, "_size", "_binary", CLOCK, F.inline_outer("_parsed")]
    renamed = {name: f"_json_{name}" for name in (*_STRING_ATTRIBUTES, "data")}
    with_attributes = [
        *KAFKA_COLUMNS, "_size", "_binary", CLOCK,
        *(attribute(name).alias(name) for name in _STRING_ATTRIBUTES),
        F.when(binary & (F.col("_size") > 0), F.try_parse_json(text)).otherwise(F.col("_json_data")).alias("data"),
    ]
    missing_names = F.concat_ws(
        ", ", *(F.when(F.col(name).isNull(), F.lit(name)) for name in REQUIRED_ATTRIBUTES)
    )
    any_missing = F.lit(False)
    for name in REQUIRED_ATTRIBUTES:
        any_missing = any_missing | F.col(name).isNull()
    reparsed = F.try_parse_json(text)
    event_time = rfc3339_time(F.col("time"))
    ahead = F.unix_micros(F.col("event_time")) - F.col(CLOCK)
    bad_header = F.exists("headers", lambda h: F.startswith(h["key"], F.lit(BINARY_PREFIX))
                          & ~F.is_valid_utf8(h["value"].cast("string")))
    reason = (
        F.when(F.col("_size") == 0, F.lit(Reason.EMPTY.value))
        .when(F.col("_size") > max_bytes, F.lit(Reason.OVERSIZE.value))
        .when(~F.is_valid_utf8(text) | (binary & bad_header), F.lit(Reason.NOT_UTF8.value))
        .when(
            any_missing,
            F.when(reparsed.isNull(), F.lit(Reason.NOT_JSON.value))
            .when(~binary & ~F.startswith(F.schema_of_variant(reparsed), F.lit("OBJECT")), F.lit(Reason.NOT_OBJECT.value))
            .otherwise(F.lit(Reason.MISSING_ATTRIBUTE.value)),
        )
        .when(binary & F.col("data").isNull(), F.lit(Reason.NOT_JSON.value))
        .when(F.col("specversion") != F.lit(SPEC_VERSION), F.lit(Reason.BAD_SPECVERSION.value))
        .when(F.col(TENANT).isNull(), F.lit(Reason.MISSING_TENANT.value))
        .when(F.col("time").isNotNull() & F.col("_time").isNull(), F.lit(Reason.BAD_TIME.value))
        .when(ahead > F.lit(round(max_future_skew_s * 1_000_000)), F.lit(Reason.FUTURE_TIME.value))
    )
    timed = [
        *KAFKA_COLUMNS, *_STRING_ATTRIBUTES, "data", "_size", "_binary", CLOCK,
        event_time.alias("_time"), F.coalesce(event_time, F.col("timestamp")).alias("event_time"),
    ]
    checked = [
        *KAFKA_COLUMNS,
        *(name for name in _STRING_ATTRIBUTES if name != "time"),
        "data",
        F.col("_time").alias("time"),
        "event_time",
        CLOCK,
        reason.alias("reason"),
        "_size",
        missing_names.alias("_missing"),
    ]
    detail = _detail_of(F.col("reason"), F.col("_size"), F.col("_missing"), max_bytes, max_future_skew_s)
    return (
        lambda frame: frame.select(*staged),
        lambda frame: frame.select(*unpacked).withColumnsRenamed(renamed),
        lambda frame: frame.select(*with_attributes),
        lambda frame: frame.select(*timed),
        lambda frame: frame.select(*checked),
        lambda frame: frame.select("*", detail.alias("detail")).drop("_size", "_missing"),
    )


def batch_micros(*, per_record: bool = False) -> Column:
    """The micro-batch's time (``current_timestamp()``) in microseconds since the epoch,
    kept out of the generated code. Spark writes that time into a stage's Java source as a
    constant, so a plan that used it directly would differ, and be compiled again, in every
    micro-batch: at each real-time checkpoint of the matching query, compiling was a quarter
    of the planning thread's time. ``reflect`` is evaluated without code generation, so the
    time stays a value and the code stays the same from one batch to the next.

    With ``per_record``, the time the record is read, to the millisecond: a real-time batch
    lasts ``delivery.realtime_checkpoint_s`` (minutes), and its start would put events read
    late in it that far ahead of the clock (past ``envelope.max_future_skew_s``), and date
    its self-audit records that far back. A replay of such a batch may judge an event at
    the very bound otherwise than the first reading did."""
    if per_record:
        return F.reflect(F.lit("java.lang.System"), F.lit("currentTimeMillis")).cast("long") * F.lit(1000)
    return F.reflect(F.lit("java.lang.Long"), F.lit("valueOf"), F.unix_micros(F.current_timestamp())).cast("long")


def rfc3339_time(text: Column) -> Column:
    """The instant ``text`` names if it is an RFC 3339 date-time (``wayline.core.envelope``'s
    rule), else NULL: what the pipelines take as an event's time."""
    # Only a time matching the reference's pattern is cast: Spark's cast alone takes "2025".
    instant = F.upper(text).try_cast("timestamp")
    return F.when(text.rlike(TIME_PATTERN) & instant.between(F.lit(EARLIEST_TIME), F.lit(LATEST_TIME)), instant)


def valid_events(parsed: DataFrame) -> DataFrame:
    return parsed.where(F.col("reason").isNull()).select(*ENVELOPE_COLUMNS, "topic", "partition", "offset")


# Kafka's own upper bound of a record's size in a batch of one: the batch header (61
# bytes), the record's framing (at most 21), the key, value and header-count varints (5
# each), and per header its two length varints (5 each).
_RECORD_OVERHEAD = 61 + 21 + 3 * 5
_HEADER_OVERHEAD = 2 * 5


def _octets(column: Column) -> Column:
    return F.coalesce(F.octet_length(column), F.lit(0))


def _record_bytes(key: Column, value: Column, headers: Column) -> Column:
    """At least what Kafka's producer counts for this record against ``max.request.size``."""
    header_bytes = F.aggregate(
        headers, F.lit(0).cast("long"),
        lambda total, h: total + _HEADER_OVERHEAD + _octets(h["key"]) + _octets(h["value"]),
    )
    return F.lit(_RECORD_OVERHEAD) + _octets(key) + _octets(value) + header_bytes


@functools.cache
def quarantine_copy(quarantine_topic: str, max_bytes: int) -> Column:
    """A bad row's quarantine copy as the Kafka sink writes it — a struct of ``topic``,
    ``key``, ``value`` and ``headers`` — plus ``truncated``: the original key, value and
    headers, and why.

    A copy that would exceed ``max_bytes`` (the producer's and broker's limit, less a
    margin) would be refused by Kafka and stop the query on every restart; it carries
    instead a JSON reference to the original (topic, partition, offset) as its value, the
    key if it fits, none of the original headers, and a ``TRUNCATED_HEADER`` saying why.
    """

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    added = F.array(
        header(REASON_HEADER, F.col("reason")),
        header(DETAIL_HEADER, F.col("detail")),
        header(SOURCE_TOPIC_HEADER, F.col("topic")),
        header(SOURCE_PARTITION_HEADER, F.col("partition").cast("string")),
        header(SOURCE_OFFSET_HEADER, F.col("offset").cast("string")),
    )
    original = F.coalesce(F.col("headers"), F.array().cast("array<struct<key:string,value:binary>>"))
    headers = F.concat(original, added)
    size = _record_bytes(F.col("key"), F.col("value"), headers)
    fits = size <= F.lit(max_bytes)
    why = F.concat(
        F.lit("the copy would be "), size.cast("string"),
        F.lit(f" bytes, over the {max_bytes}-byte limit (kafka.quarantine_max_bytes); "
              "its value and headers are left out: read the original at the source topic, partition and offset"),
    )
    reference = F.to_json(F.struct("topic", "partition", "offset")).cast("binary")
    reference_headers = F.concat(added, F.array(header(TRUNCATED_HEADER, why)))
    # A reference copy keeps the key if it still fits with it (a huge key would not).
    key_fits = _record_bytes(F.col("key"), reference, reference_headers) <= F.lit(max_bytes)
    return F.struct(
        F.lit(quarantine_topic).alias("topic"),
        F.when(fits | key_fits, F.col("key")).alias("key"),
        F.when(fits, F.col("value")).otherwise(reference).alias("value"),
        F.when(fits, headers).otherwise(reference_headers).alias("headers"),
        (~fits).alias("truncated"),
    )


@functools.cache
def event_body() -> Column:
    """The structured-mode CloudEvent JSON an endpoint receives for an event, as bytes.

    A structured-mode record is sent as it came: its Kafka value, byte for byte. For a
    binary-mode record the JSON is assembled in the JVM: one member per ``ce_`` header
    (the first of a repeated header wins, as in the parser; every extension is kept, as
    a string), then ``data``: the record's value, which the parser has checked is JSON,
    spliced in unchanged.
    """
    prefix = F.lit(BINARY_PREFIX)
    binary = F.exists("headers", lambda h: h["key"] == F.lit(f"{BINARY_PREFIX}specversion"))
    attributes = F.filter(
        "headers",
        lambda h, i: F.startswith(h["key"], prefix)
        & (h["key"] != F.lit(f"{BINARY_PREFIX}data"))
        & h["value"].isNotNull()
        & ~F.exists(F.slice("headers", F.lit(1), i), lambda earlier: earlier["key"] == h["key"]),
    )
    members = F.to_json(F.map_from_entries(F.transform(
        attributes,
        lambda h: F.struct(
            h["key"].substr(F.lit(len(BINARY_PREFIX) + 1), F.length(h["key"])), h["value"].cast("string"),
        ),
    )))
    assembled = F.concat(
        members.substr(F.lit(1), F.length(members) - 1), F.lit(',"data":'), F.col("value").cast("string"), F.lit("}"),
    )
    return F.when(binary, assembled.cast("binary")).otherwise(F.col("value"))


__all__ = [
    "CLOCK", "ENVELOPE_COLUMNS", "ENVELOPE_SCHEMA", "batch_micros", "event_body", "parse_events", "quarantine_copy",
    "rfc3339_time", "valid_events",
]
