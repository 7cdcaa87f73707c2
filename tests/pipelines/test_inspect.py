"""The inspect query against the real broker: exact counts per type, exact quarantine reasons,
and nothing written (the delivery job owns the quarantine copies: tests/pipelines/test_hostile_records.py)."""

from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer

from wayline.core.kafka import ensure_topics
from wayline.pipelines.inspect import InspectCounts, start_inspect
from wayline.stack.loadgen import EventFactory, catalog, produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def read_all(bootstrap: str, topic: str, expected: int, rounds: int = 60) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records = []
    try:
        for _ in range(rounds):
            records += [m for m in consumer.consume(1000, timeout=1) if m.error() is None]
            if len(records) >= expected:
                break
    finally:
        consumer.close()
    return records


def test_inspect_counts_types_and_quarantine_reasons_and_writes_no_copy(settings, spark, tmp_path, unique) -> None:
    prefix = f"events.{unique}."
    local = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix, "quarantine_topic": f"quarantine.{unique}"}),
    })
    types = catalog(prefix)[:3]
    ensure_topics(settings.kafka_bootstrap(), {t.topic for t in types} | {local.kafka.quarantine_topic}, 2)
    factory = EventFactory(seed=1, tenants=50, topic_prefix=prefix)
    good = [factory.valid(types[i % 3]) for i in range(300)] + [factory.valid(types[0]) for _ in range(50)]
    bad = [factory.broken(kind, types[1]) for kind in EventFactory.BROKEN_KINDS for _ in range(5)]
    produce(settings.kafka_bootstrap(), iter(good + bad))

    counts = InspectCounts()
    query = start_inspect(spark, local, counts, checkpoint=tmp_path / "ck", available_now=True)
    query.awaitTermination(180)
    assert query.exception() is None

    per_type, per_reason, _ = counts.snapshot()
    assert per_type == Counter({types[0].name: 150, types[1].name: 100, types[2].name: 100})
    assert per_reason == Counter({kind: 5 for kind in EventFactory.BROKEN_KINDS})

    assert read_all(settings.kafka_bootstrap(), local.kafka.quarantine_topic, 1, rounds=5) == []


def test_a_record_whose_quarantine_copy_would_not_fit_the_broker_is_counted(settings, spark, tmp_path, unique) -> None:
    """1,048,300 bytes fit Kafka's default limit; the copy with five headers more would not:
    the delivery job writes a reference copy instead, which inspect counts."""
    prefix = f"events.{unique}."
    topic, quarantine = f"{prefix}big", f"quarantine.{unique}"
    local = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix, "quarantine_topic": quarantine}),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, {topic, quarantine}, 1)
    big = b'{"pad":"' + b"x" * (1_048_300 - 10) + b'"}'
    assert len(big) == 1_048_300
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    producer.produce(topic, key=b"big", value=big, headers=[("trace", b"t-1")])
    producer.produce(topic, key=b"small", value=b"not json")
    assert producer.flush(30) == 0

    counts = InspectCounts()
    query = start_inspect(spark, local, counts, checkpoint=tmp_path / "ck", available_now=True)
    query.awaitTermination(180)
    assert query.exception() is None, "the query got past the record"

    _, per_reason, _ = counts.snapshot()
    assert per_reason == Counter({"oversize": 1, "not_json": 1})
    assert counts.truncated == 1
