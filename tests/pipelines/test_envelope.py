"""The Spark envelope parser gives every corpus record the same verdict as the reference parser."""

import pytest

from tests.envelope_corpus import CASES, MAX_BYTES, MAX_FUTURE_SKEW_S, expected_detail
from wayline.core.settings import EnvelopeSettings
from wayline.pipelines.envelope import parse_events, quarantine_copy, valid_events

pytestmark = pytest.mark.integration

KAFKA_SCHEMA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
    "partition int, offset long, timestamp timestamp"
)


@pytest.fixture(scope="module")
def parsed(spark):
    from datetime import datetime, timezone

    rows = [
        (case.name.encode(), case.value, [(k, v) for k, v in case.headers] or None,
         "events.test", 0, offset, datetime(2026, 11, 22, tzinfo=timezone.utc))
        for offset, case in enumerate(CASES)
    ]
    envelope = EnvelopeSettings(max_bytes=MAX_BYTES, max_future_skew_s=MAX_FUTURE_SKEW_S)
    return parse_events(spark.createDataFrame(rows, KAFKA_SCHEMA), envelope).cache()


def quarantine_records(parsed, topic: str, max_bytes: int):
    """The bad rows' quarantine copies, as the delivery job writes them (with ``truncated``)."""
    return parsed.where("reason IS NOT NULL").select(quarantine_copy(topic, max_bytes).alias("c")).select("c.*")


def test_spark_verdicts_equal_the_reference(parsed) -> None:
    from datetime import UTC, datetime, timedelta

    from pyspark.sql import functions as F

    EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
    # The instant as microseconds since the epoch: no time zone between Spark and the test.
    rows = parsed.select("key", "reason", "detail", F.unix_micros("time").alias("micros")).collect()
    got = {row["key"].decode(): (row["reason"], row["detail"], None if row["reason"] else row["micros"])
           for row in rows}
    expected = {
        case.name: (case.reason, expected_detail(case) if case.reason else None,
                    case.time and (case.time - EPOCH) // timedelta(microseconds=1))
        for case in CASES
    }
    assert got == expected


def test_valid_events_have_typed_columns(parsed) -> None:
    rows = {row["id"]: row for row in valid_events(parsed).collect()}
    assert set(rows) == {"evt-1", "5", "evt-b"}
    binary = rows["evt-b"]
    assert (binary["type"], binary["tenantid"], binary["subtenantid"]) == ("contact.created", "t-9", "d-100")
    assert binary["data"].toJson() == '{"name":"Ada"}'
    assert binary["event_time"] is not None


def test_quarantine_keeps_the_original_record_and_says_why(parsed) -> None:
    rows = quarantine_records(parsed, "wayline.quarantine", 1_047_552).drop("truncated").collect()
    by_key = {row["key"].decode(): row for row in rows}
    assert set(by_key) == {case.name for case in CASES if case.reason}
    original = {case.name: case for case in CASES}
    for key, row in by_key.items():
        headers = {h["key"]: bytes(h["value"]) for h in row["headers"]}
        assert row["topic"] == "wayline.quarantine"
        assert row["value"] == original[key].value
        assert headers["wayline-quarantine-reason"] == original[key].reason.encode()
        assert headers["wayline-source-topic"] == b"events.test"
        assert dict(original[key].headers).items() <= headers.items(), "the original headers, byte for byte"
    kept = {h["key"] for h in by_key["binary mode, no tenant"]["headers"]}
    assert {"ce_id", "ce_type"} <= kept


def test_a_copy_over_the_limit_references_its_original(parsed) -> None:
    import orjson

    oversize = next(case for case in CASES if case.reason == "oversize")
    assert oversize.value is not None
    # Between the largest other bad record's copy and the oversize one's.
    limit = len(oversize.value) + 300
    rows = {row["key"].decode(): row for row in quarantine_records(parsed, "q", limit).collect()}
    truncated = {key for key, row in rows.items() if row["truncated"]}
    assert truncated == {oversize.name}
    copy = rows[oversize.name]
    offset = CASES.index(oversize)
    assert orjson.loads(copy["value"]) == {"topic": "events.test", "partition": 0, "offset": offset}
    headers = {h["key"]: h["value"].decode() for h in copy["headers"]}
    assert headers["wayline-quarantine-reason"] == "oversize"
    assert headers["wayline-source-offset"] == str(offset)
    why = headers["wayline-quarantine-truncated"]
    assert why.startswith("the copy would be ") and f"bytes, over the {limit}-byte limit" in why
    assert not set(headers) & {name for name, _ in oversize.headers}, "no original headers"
    assert all(row["value"] == next(c for c in CASES if c.name == key).value
               for key, row in rows.items() if key not in truncated)


def test_binary_mode_bodies_are_assembled_from_the_headers(spark) -> None:
    from datetime import datetime, timezone

    import orjson

    from wayline.pipelines.envelope import event_body

    schema = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
              "partition int, offset long, timestamp timestamp")
    stamp = datetime(2026, 11, 22, tzinfo=timezone.utc)
    attributes = [("ce_specversion", b"1.0"), ("ce_id", b"b-1"), ("ce_source", b'/quo"te'), ("ce_type", b"t"),
                  ("ce_tenantid", b"7")]
    rows = [
        (None, b'{"a": [1, 2]}', attributes + [("ce_source", b"/second"), ("ce_data", b"x"), ("ce_note", None),
                                               ("traceparent", b"not-an-attribute")], "events.t", 0, 0, stamp),
        (None, b' {"id":"s-1","specversion":"1.0","source":"/s","type":"t","tenantid":"7"}', None, "events.t", 0, 1, stamp),
    ]
    parsed = parse_events(spark.createDataFrame(rows, schema), EnvelopeSettings(max_bytes=1024))
    valid = parsed.where("reason IS NULL")
    bodies = {row["id"]: row["body"] for row in valid.select("id", event_body().alias("body")).collect()}
    assert bodies["s-1"] == rows[1][1], "structured: the value itself"
    assert orjson.loads(bodies["b-1"]) == {"specversion": "1.0", "id": "b-1", "source": '/quo"te', "type": "t",
                                           "tenantid": "7", "data": {"a": [1, 2]}}


def test_the_kafka_timestamp_of_an_event_without_time_is_bounded_too(spark) -> None:
    """Without a `time`, the event time is the record's Kafka timestamp, which a producer sets."""
    from datetime import UTC, datetime, timedelta

    value = b'{"specversion":"1.0","id":"k-1","source":"/s","type":"t","tenantid":"7"}'
    now = datetime.now(UTC)
    rows = [(b"soon", value, None, "events.t", 0, 0, now + timedelta(seconds=60)),
            (b"far", value, None, "events.t", 0, 1, now + timedelta(days=1))]
    parsed = parse_events(spark.createDataFrame(rows, KAFKA_SCHEMA), EnvelopeSettings(max_future_skew_s=300))
    verdicts = {row["key"]: (row["reason"], row["detail"]) for row in parsed.collect()}
    assert verdicts == {b"soon": (None, None),
                        b"far": ("future_time", "the event time is more than 300 s ahead of the clock")}


def test_a_per_record_clock_is_each_records_own_time_and_the_batch_clock_is_one(spark) -> None:
    """Under the real-time trigger a batch lasts minutes: each record is judged on the time it is read."""
    import time

    from wayline.pipelines.envelope import batch_micros

    def after_its_id_in_seconds(batches):
        for batch in batches:
            time.sleep(int(batch["id"].max()) if len(batch) else 0)
            yield batch

    rows = (spark.range(0, 2, numPartitions=2).mapInPandas(after_its_id_in_seconds, "id long")
            .select("id", batch_micros(per_record=True).alias("read"), batch_micros().alias("batch"))
            .orderBy("id").collect())
    first, second = rows
    assert second["read"] - first["read"] >= 500_000
    assert first["batch"] == second["batch"]
