"""The delivery self-audit on the real broker: audit records written as the delivery job writes
them (one per consumed record, one per final outcome), reconciled by the built-in
reconciliation that `self_audit.ensure` sets up, read back from Kafka and PostgreSQL.

Three source topics, three consumed records each, all in the window starting at T0:
``orders.healthy`` reaches one outcome each; ``orders.lost`` lost one outcome record;
``orders.twice`` has one record with two outcomes. A heartbeat then moves the watermark
past the window, which closes it. Periods o = 60 s, n = 10 s (test settings); m as derived.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from rich.console import Console

from tests.recon.streams import caught_up, end_offsets, read_all
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)  # a window boundary
T0_MS = int(T0.timestamp() * 1000)
OUTCOMES = {"orders.healthy": ["delivered", "filtered", "quarantined"],
            "orders.lost": ["delivered", None, "dead_lettered"],  # None: the outcome record was removed
            "orders.twice": ["delivered", "delivered", "filtered"]}
TWICE = "orders.twice/1/1"  # its outcome is written twice


def record(topic: str, offset: int) -> str:
    return f"{topic}/{offset % 2}/{offset}"


def audit_event(kind: str, topic: str, offset: int, outcome: str | None = None) -> bytes:
    data: dict[str, Any] = {"record": record(topic, offset), "event_id": f"ev-{topic}-{offset}",
                            "event_time": (T0 + timedelta(seconds=offset + 1)).isoformat(), "topic": topic}
    if outcome is not None:
        data["outcome"] = outcome
    return orjson.dumps({"specversion": "1.0", "id": f"{kind}-{topic}-{offset}-{time.time_ns()}",
                         "source": "wayline/delivery", "type": f"wayline.audit.{kind}", "tenantid": "wayline",
                         "time": datetime.now(timezone.utc).isoformat(), "data": data})


@dataclass
class Audit:
    first: Any
    again: Any
    changed: Any
    windows: dict[str, Any]
    missing: list[str]
    events: list[dict[str, Any]]
    view: str


@pytest.fixture(scope="module")
def audit(settings: Settings, spark, database, tmp_path_factory) -> Iterator[Audit]:
    from wayline.pipelines.recon_job import ReconJob
    from wayline.recon import reconciliation, self_audit, store
    from wayline.registry.access import ADMIN

    prefix = f"sa{time.time_ns() % 10**8}"
    test_settings = settings.model_copy(update={
        "audit": settings.audit.model_copy(update={
            "consumed_topic": f"{prefix}.consumed", "outcomes_topic": f"{prefix}.outcomes", "o_s": 60, "n_s": 10,
            "z_s": 3600}),
        "recon": settings.recon.model_copy(update={"output_topic": f"{prefix}.out", "trigger_interval_s": 0.5,
                                                   "buckets": 4}),
    })
    # The reconciliation is one by name, and the delivery jobs of other tests feed the
    # default audit topics: start from none, so its figures and missing ids are this test's.
    with database.transaction() as session:
        existing = self_audit.find(session)
        if existing is not None:
            reconciliation.delete(session, ADMIN, existing)
    first = self_audit.ensure(database, test_settings)
    again = self_audit.ensure(database, test_settings)
    changed = self_audit.ensure(database, test_settings.model_copy(update={
        "audit": test_settings.audit.model_copy(update={"n_s": 20})}))
    self_audit.ensure(database, test_settings)  # back to n = 10 s for the run below
    bootstrap = settings.kafka_bootstrap()
    topics = [test_settings.audit.consumed_topic, test_settings.audit.outcomes_topic]
    producer = Producer({"bootstrap.servers": bootstrap})
    job = ReconJob(spark, test_settings, database, tmp_path_factory.mktemp("self-audit-checkpoint")).start()
    try:
        for topic, outcomes in OUTCOMES.items():
            for offset, outcome in enumerate(outcomes):
                producer.produce(topics[0], value=audit_event("consumed", topic, offset))
                if outcome is not None:
                    producer.produce(topics[1], value=audit_event("outcome", topic, offset, outcome))
                if record(topic, offset) == TWICE:
                    producer.produce(topics[1], value=audit_event("outcome", topic, offset, outcome))
        assert producer.flush(30) == 0
        caught_up(job, end_offsets(bootstrap, topics))
        producer.produce(topics[0], value=orjson.dumps({
            "specversion": "1.0", "id": f"hb-{time.time_ns()}", "source": "wayline/delivery",
            "type": settings.recon.heartbeat_type, "tenantid": "wayline", "time": (T0 + timedelta(seconds=300)).isoformat()}))
        assert producer.flush(30) == 0
        caught_up(job, end_offsets(bootstrap, topics))
    finally:
        job.stop()
        producer.close()
    assert job.exception() is None
    with database.transaction() as session:
        windows = {w.source: w for w in store.windows(session, first.id, 100)}
        missing = [m["id"] for m in store.missing_ids(session, first.id, None, 100, 100).data]
    from wayline.cli.recon import self_audit_view

    console = Console(width=200, record=True)
    console.print(self_audit_view(test_settings))
    events = [e for e in read_all(bootstrap, test_settings.recon.output_topic)
              if e["data"]["reconciliation_id"] == first.id]
    yield Audit(first, again, changed, windows, missing, events, " ".join(console.export_text().split()))


def test_ensure_is_idempotent_and_follows_the_settings(audit: Audit, settings: Settings) -> None:
    from wayline.recon import self_audit

    assert audit.first.name == self_audit.NAME
    assert (audit.again.id, audit.again.revision) == (audit.first.id, audit.first.revision)
    assert (audit.changed.id, audit.changed.revision, audit.changed.periods.n) == (
        audit.first.id, audit.first.revision + 1, 20)
    assert audit.first.expected.role == "consumer-expected"
    assert (audit.first.expected.id, audit.first.expected.time, audit.first.expected.source) == (
        "data.record", "data.event_time", "data.topic")
    # m outlasts a record that went through every retry, each delay at its longest.
    longest = sum(settings.delivery.retry_schedule_s) * (1 + settings.delivery.retry_jitter)
    assert audit.first.periods.m > longest


def test_a_removed_outcome_is_exactly_the_one_missing(audit: Audit) -> None:
    assert audit.missing == ["orders.lost/1/1"]
    missing = [(e["type"], e["subject"]) for e in audit.events if e["type"] != "wayline.recon.metrics"]
    assert sorted(set(missing)) == [("wayline.recon.missing", "orders.lost/1/1")]
    lost = audit.windows["orders.lost"]
    assert (lost.window_start, vars(lost.counts), lost.revision) == (T0_MS, {
        "expected": 3, "matched": 2, "missing": 1, "found": 0, "duplicates": 0, "late": 0, "too_late": 0,
        "unreadable": 0}, 1)
    assert lost.completeness < 100


def test_a_second_outcome_is_one_duplicate(audit: Audit) -> None:
    twice = audit.windows["orders.twice"]
    assert (twice.counts.expected, twice.counts.matched, twice.counts.duplicates, twice.completeness) == (
        3, 3, 1, 100.0)


def test_all_outcomes_present_is_complete(audit: Audit) -> None:
    healthy = audit.windows["orders.healthy"]
    assert (healthy.counts.expected, healthy.counts.matched, healthy.counts.duplicates, healthy.completeness,
            healthy.revision) == (3, 3, 0, 100.0, 1)
    published = {(e["data"]["source"], e["data"]["completeness"], e["data"]["duplicates"])
                 for e in audit.events if e["type"] == "wayline.recon.metrics"}
    assert published == {("orders.healthy", 100.0, 0), ("orders.lost", 66.667, 0), ("orders.twice", 100.0, 1)}


def test_the_status_view_shows_completeness_and_duplicates(audit: Audit) -> None:
    assert "delivery self-audit (delivery-self-audit): 1 records without an outcome now" in audit.view
    assert "orders.lost │ 2026-03-01T09:00:00.000Z │ 3 │ 2 │ 66.667 % │ 0 │ 1" in audit.view
    assert "orders.twice │ 2026-03-01T09:00:00.000Z │ 3 │ 3 │ 100 % │ 1 │ 1" in audit.view
