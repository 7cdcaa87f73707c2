"""Hostile Kafka records against the real broker: the Kafka counterpart of
tests/api/test_hostile_input.py. Each record that is not a usable event is quarantined
once, by the delivery job, with its reason, its source and a self-audit outcome, and is
never routed to an endpoint; one event from the far future moves no rule's watermark."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Message, Producer
from sqlalchemy import delete

from tests.recon.streams import caught_up, end_offsets, read_records
from tests.waiting import wait_for
from wayline.core.envelope import REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_TOPIC_HEADER, TRUNCATED_HEADER
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery import work
from wayline.delivery.metrics import DeliveryMetrics
from wayline.pipelines.matching_job import MatchingJob
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECEIVER = "http://127.0.0.1:9"  # never called: sending is the sender processes' part


def _event(event_id: str, event_type: str, tenant: str, **extra: Any) -> dict[str, Any]:
    return {"specversion": "1.0", "id": event_id, "source": "/hostile", "type": event_type, "tenantid": tenant,
            "data": {"name": "Ada"}, **extra}


def _subscribe(database, endpoints: EndpointService, event_type: str, tenant: str) -> str:
    with database.transaction() as s:
        catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=event_type))
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=tenant)])
        owner = customer.create(s, ADMIN, customer.CustomerIn(name=f"{tenant} customer"))
        endpoint = endpoints.create(s, ADMIN, EndpointIn(url=f"{RECEIVER}/hook", customer_id=owner.id, secret=None))
        return subscription.create(s, ADMIN, subscription.SubscriptionIn(
            endpoint_id=endpoint.id, event_types=[event_type])).id


def test_records_that_are_not_usable_events_are_quarantined_once_and_audited_never_routed(
    spark, api_settings: Settings, database, unique: str, tmp_path: Path,
) -> None:
    name = f"hr{unique}"
    settings = api_settings.model_copy(update={
        "kafka": api_settings.kafka.model_copy(update={
            "event_topic_prefix": f"events.{name}.", "alert_topic_prefix": f"alerts.{name}.",
            "quarantine_topic": f"wayline.quarantine.{name}",
        }),
        "delivery": api_settings.delivery.model_copy(update={
            "engine": "senders", "matching_trigger": "realtime", "realtime_checkpoint_s": 5.0,
            "work_topic": f"wayline.work.{name}", "work_partitions": 1, "batch_topic": f"wayline.batching.{name}",
        }),
    })
    bootstrap = settings.kafka_bootstrap()
    topic = f"events.{name}.in"
    # One partition: a real-time query holds a task slot per source partition.
    ensure_topics(bootstrap, [topic, settings.kafka.quarantine_topic], 1)
    event_type, tenant = f"{name}.signed.up", f"{name}-t"
    _subscribe(database, EndpointService.from_settings(settings), event_type, tenant)

    def structured(event_id: str, **extra: Any) -> bytes:
        return orjson.dumps(_event(event_id, event_type, tenant, **extra))

    binary = [("ce_specversion", b"1.0"), ("ce_id", b"\xc3("), ("ce_source", b"/hostile"),
              ("ce_type", event_type.encode()), ("ce_tenantid", tenant.encode())]
    big = b'{"pad":"' + b"x" * (1_048_300 - 10) + b'"}'  # fits Kafka; its copy with five headers more would not
    # (offset, value, headers, the reason it is quarantined for; None: a valid event)
    records: list[tuple[bytes, list[tuple[str, bytes]], str | None]] = [
        (structured("ok-0"), [], None),
        (structured("bad-utf8").replace(b"Ada", b"A\xffa"), [], "not_utf8"),
        (b'{"name":"Ada"}', binary, "not_utf8"),
        (structured("year-0", time="0000-01-01T00:00:00Z"), [], "bad_time"),
        (structured("far-future", time="9999-12-31T23:59:59Z"), [], "future_time"),
        (big, [("trace", b"t-1")], "oversize"),
        (structured("ok-1"), [], None),
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    for value, headers, _ in records:
        producer.produce(topic, value=value, headers=headers)
    assert producer.flush(30) == 0
    bad = {offset: reason for offset, (_, _, reason) in enumerate(records) if reason is not None}

    job = MatchingJob(spark, settings, database, EndpointService.from_settings(settings), DeliveryMetrics(),
                      tmp_path / "checkpoint").start()
    try:
        def outcomes() -> list[dict[str, Any]]:
            return [orjson.loads(m.value())["data"] for m in read_records(bootstrap, settings.audit.outcomes_topic)
                    if m.key().decode().startswith(f"{topic}/")]

        def quarantined() -> list[Message]:
            return [m for m in read_records(bootstrap, settings.kafka.quarantine_topic)
                    if dict(m.headers() or []).get(SOURCE_TOPIC_HEADER) == topic.encode()]

        wait_for(lambda: job.exception() is not None or len(outcomes()) >= len(bad), "the quarantine outcomes", 300)
        assert job.exception() is None, job.exception()
        wait_for(lambda: len(read_records(bootstrap, settings.delivery.work_topic)) >= 2, "the requests", 120)
    finally:
        job.stop()
    assert job.exception() is None, job.exception()

    routed = [dict(m.headers())[work.EVENT].decode() for m in read_records(bootstrap, settings.delivery.work_topic)]
    assert sorted(routed) == ["ok-0", "ok-1"], "no hostile record is routed to an endpoint"
    copies = {int(dict(m.headers())[SOURCE_OFFSET_HEADER]): m for m in quarantined()}
    assert {offset: dict(m.headers())[REASON_HEADER].decode() for offset, m in copies.items()} == bad
    for offset in bad.keys() - {5}:
        value, headers, _ = records[offset]
        assert copies[offset].value() == value, "the original, byte for byte"
        assert headers == [(k, v) for k, v in copies[offset].headers() if not k.startswith("wayline-")]
    reference = copies[5]
    assert orjson.loads(reference.value()) == {"topic": topic, "partition": 0, "offset": 5}
    assert b"1048" in dict(reference.headers())[TRUNCATED_HEADER] and "trace" not in dict(reference.headers())
    assert Counter((o["record"], o["outcome"]) for o in outcomes()) == Counter(
        (f"{topic}/0/{offset}", "quarantined") for offset in bad)


T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def test_one_event_from_the_far_future_moves_no_window_rules_watermark(
    settings: Settings, spark: Any, database: Any, tmp_path: Path, unique: str,
) -> None:
    """It used to move the watermark to 9999-12-31: every later event was late, and every
    window rule fell silent for good."""
    from confluent_kafka import Consumer

    from wayline.pipelines.rules_job import RulesJob
    from wayline.registry import rule as rule_service
    from wayline.registry.models import Rule

    prefix = f"events.fut{unique}."
    topic_in, topic_out = prefix + "in", f"fut.out.{unique}"
    job_settings = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix}),
        "rules": settings.rules.model_copy(update={"allowed_lateness_s": 0.0, "shards": 4}),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic_in, topic_out], 1)
    with database.transaction() as session:
        session.execute(delete(Rule))
        rule_service.create(session, ADMIN, rule_service.RuleIn(
            name=f"per-minute-{unique}", output_topic=topic_out, output_type="alert.per_minute",
            sql="SELECT data.user, COUNT(*) AS n FROM events GROUP BY data.user, window(event_time, '1 minute')"),
            rule_service.RulePolicy.from_settings(settings))
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(*events: tuple[str, str]) -> None:
        for event_id, time in events:
            producer.produce(topic_in, value=orjson.dumps({
                "specversion": "1.0", "id": event_id, "source": "tests", "type": "visit", "tenantid": "t",
                "time": time, "data": {"user": "u1"}}))
        producer.flush(30)

    def at(seconds: int) -> str:
        return (T0 + timedelta(seconds=seconds)).isoformat()

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fut-{unique}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_out])
    seen: list[tuple[str, int]] = []

    def windows() -> list[tuple[str, int]]:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            window = orjson.loads(message.value())
            seen.append((window["time"], window["data"]["n"]))
        return seen

    job = RulesJob(spark, job_settings, database, tmp_path / "checkpoint").start()
    try:
        produce(("a1", at(1)), ("a2", at(2)), ("clock-1", at(61)))
        wait_for(lambda: job.raise_if_failed() or len(windows()) >= 1, "the first window", timeout_s=240)
        produce(("hostile", "9999-12-31T23:59:59Z"))
        # Read in a micro-batch of its own: the watermark it would set holds from the next one.
        caught_up(job, end_offsets(bootstrap, [topic_in]))
        produce(("b1", at(62)), ("b2", at(70)), ("clock-2", at(125)))
        wait_for(lambda: job.raise_if_failed() or len(windows()) >= 2, "the window after the hostile event",
                 timeout_s=240)
    finally:
        job.stop()
        consumer.close()
    # Before, the second window closed at once on the hostile event's watermark, holding
    # clock-1 alone, and b1 and b2 were dropped as late.
    assert seen == [("2026-03-01T09:01:00Z", 2), ("2026-03-01T09:02:00Z", 3)]
