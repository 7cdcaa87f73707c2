"""The recon job on the real broker with 16 buckets: what it does with records it cannot read,
and one clock per reconciliation across its buckets.

As in ``test_recon.py``: reconciliations created through the admin API, both streams
produced to the real broker in acts (each worked off before the next), the outputs read
back from Kafka and PostgreSQL, every figure exact.

``unreadable`` (issue 23, item 12): an audit topic read by ``data.event_id``,
``data.event_time`` and ``data.topic`` gets one good record and one of each kind a
reconciliation cannot read — no ``tenantid``, a value over ``envelope.max_bytes`` (1 KiB),
a ``data.event_time`` that is not a time, no ``data.event_id``, a value that is not JSON;
its events topic, one that is not JSON. Each is counted ``unreadable`` in its window and
source, through to the published metrics, the API and the gauges; each of the audit
topic's is quarantined with its reason, the events topic's is left to the event pipelines.

``watermark`` is issue 23's reproduction (item 13): o = 10 s, n = 10 s, m = 30 s; the
expected id ``w-x`` at 1 s, the ids ``w-y`` and ``w-other`` (in other buckets) up to 60 s,
then ``w-x``'s actual at 1.5 s. The watermark that closes ``w-x``'s window reports it
missing before the window is published, and the actual, more than m behind that
watermark, is too late.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from tests.recon.streams import caught_up, end_offsets, read_all, read_records
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)  # a window boundary
T0_MS = int(T0.timestamp() * 1000)
BUCKETS = 16
# Their buckets (pmod(xxhash64(id), 16)), checked against Spark by the fixture.
IDS = {"w-x": 3, "w-y": 10, "w-other": 4}
SCENARIOS = {"unreadable": {"o": 60, "n": 10, "m": 120, "z": 3600}, "watermark": {"o": 10, "n": 10, "m": 30, "z": 3600}}
# How the unreadable scenario's audit side reads its records (as the delivery self-audit's does).
READ_BY_DATA = {"id": "data.event_id", "time": "data.event_time", "source": "data.topic"}


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def expected(audited: str, seconds: float) -> bytes:
    return orjson.dumps({
        "specversion": "1.0", "id": f"audit-{audited}-{time.time_ns()}", "source": "auditor", "type": "audit.record",
        "tenantid": "t-ri", "time": at(seconds), "data": {"audited_id": audited, "audited_time": at(seconds),
                                                           "system": "orders"},
    })


def actual(event_id: str, seconds: float) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": event_id, "source": "orders", "type": "order.created",
                         "tenantid": "t-ri", "time": at(seconds), "data": {"n": 1}})


def heartbeat(seconds: float) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": f"hb-{time.time_ns()}", "source": "orders",
                         "type": "wayline.recon.heartbeat", "tenantid": "t-ri", "time": at(seconds)})


def audit(data: dict[str, Any], without: str | None = None) -> bytes:
    """An audit record as the delivery self-audit writes one: the audited record's id, time and
    topic in ``data``; ``without``: an attribute left out."""
    event = {"specversion": "1.0", "id": f"audit-{time.time_ns()}", "source": "wayline/delivery",
             "type": "wayline.audit.consumed", "tenantid": "wayline", "time": at(0), "data": data}
    event.pop(without or "", None)
    return orjson.dumps(event)


def audited(event_id: str | None, event_time: str, **more: Any) -> dict[str, Any]:
    data = {"event_time": event_time, "topic": "orders", **more}
    return data if event_id is None else {"event_id": event_id, **data}


UNREADABLE_AUDIT = {  # its quarantine reason -> an audit record the reconciliation cannot read
    "missing_tenant": audit(audited("u-nt", at(1)), without="tenantid"),
    "oversize": audit(audited("u-big", at(1), pad="x" * 1100)),
    "recon_bad_time": audit(audited("u-bad-time", "yesterday")),
    "recon_missing_id": audit(audited(None, at(3))),
    "not_json": b"{not json",
}
Produced = bytes | tuple[bytes, float]  # a value, or a value and its Kafka timestamp (s after T0)
# Each act: scenario -> (expected-topic records, actual-topic records).
ACTS: list[dict[str, tuple[list[Produced], list[Produced]]]] = [
    {"unreadable": ([audit(audited("u-good", at(1))), *((value, 5) for value in UNREADABLE_AUDIT.values())],
                    [actual("u-good", 2), (b"garbage", 65)]),
     "watermark": ([expected("w-x", 1), expected("w-y", 2)], [actual("w-y", 2)])},
    {"unreadable": ([], [heartbeat(200)]),  # windows 0 and 60 close
     "watermark": ([expected("w-other", 60)], [actual("w-other", 60)])},  # watermark 50 s: w-x's window closes
    {"watermark": ([], [actual("w-x", 1.5)])},  # 1.5 + m <= 50: too late
]


@dataclass
class Run:
    ids: dict[str, str] = field(default_factory=dict)  # scenario -> reconciliation id
    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    windows: dict[str, list[Any]] = field(default_factory=dict)
    watermarks: dict[str, int | None] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    quarantined: list[Any] = field(default_factory=list)  # Kafka messages on the job's quarantine topic
    audit_topic: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    gauges: str = ""


@pytest.fixture(scope="module")
def run(settings: Settings, spark, database, admin_api: str, admin_key: str, tmp_path_factory) -> Iterator[Run]:
    import httpx
    from prometheus_client import CollectorRegistry, generate_latest
    from pyspark.sql import functions as F

    from wayline.pipelines.recon_job import ReconJob
    from wayline.recon import store
    from wayline.recon.metrics import ReconMetrics

    buckets = spark.createDataFrame([(id_,) for id_ in IDS], "id string").select(
        "id", F.pmod(F.xxhash64("id"), F.lit(BUCKETS)).alias("bucket")).collect()
    assert {row.id: row.bucket for row in buckets} == IDS

    prefix = f"ri{time.time_ns() % 10**8}"
    output, quarantine = f"{prefix}.out", f"{prefix}.quarantine"
    bootstrap = settings.kafka_bootstrap()
    # The job's event pipelines read "<prefix>-events.*": the unreadable scenario's events topic is one.
    topics = {name: (f"{prefix}.{name}.audit", f"{prefix}-events.{name}") for name in SCENARIOS}
    inputs = [t for pair in topics.values() for t in pair]
    # Kept however old their records' timestamps: some are set to T0's (2026-03-01).
    ensure_topics(bootstrap, inputs + [output, quarantine], 2, {"retention.ms": "-1"})
    result = Run(audit_topic=topics["unreadable"][0])
    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    for name, periods in SCENARIOS.items():
        read = READ_BY_DATA if name == "unreadable" else {
            "id": "data.audited_id", "time": "data.audited_time", "source": "data.system"}
        created = api.post("/reconciliations", json={
            "name": f"{prefix}-{name}", "output_topic": output, "periods": periods,
            "expected": {"role": "producer-expected", "topics": [topics[name][0]], **read},
            "actual": {"role": "actual", "topics": [topics[name][1]]},
        })
        assert created.status_code == 201, created.text
        result.ids[name] = created.json()["id"]

    job_settings = settings.model_copy(update={
        "recon": settings.recon.model_copy(update={"trigger_interval_s": 0.5, "buckets": BUCKETS}),
        "kafka": settings.kafka.model_copy(update={"quarantine_topic": quarantine,
                                                   "event_topic_prefix": f"{prefix}-events."}),
    })
    producer = Producer({"bootstrap.servers": bootstrap})
    job = ReconJob(spark, job_settings, database, tmp_path_factory.mktemp("recon-inputs")).start()
    try:
        for act in ACTS:
            for name, sides in act.items():
                for topic, records in zip(topics[name], sides, strict=True):
                    for record in records:
                        value, seconds = record if isinstance(record, tuple) else (record, None)
                        producer.produce(topic, value=value, **(
                            {} if seconds is None else {"timestamp": T0_MS + int(seconds * 1000)}))
            assert producer.flush(30) == 0
            caught_up(job, end_offsets(bootstrap, inputs))
    finally:
        job.stop()
        producer.close()
    assert job.exception() is None
    result.quarantined = read_records(bootstrap, quarantine)
    result.status = api.get(f"/reconciliations/{result.ids['unreadable']}/status").json()
    registry = CollectorRegistry()
    registry.register(ReconMetrics(database))
    result.gauges = generate_latest(registry).decode()
    by_recon = {recon_id: name for name, recon_id in result.ids.items()}
    for event in read_all(bootstrap, output):
        result.events[by_recon[event["data"]["reconciliation_id"]]].append(event)
    with database.transaction() as session:
        for name, recon_id in result.ids.items():
            result.windows[name] = store.windows(session, recon_id, 100)
            result.watermarks[name] = store.watermark(session, recon_id)
            result.missing[name] = [m["id"] for m in store.missing_ids(session, recon_id, None, 100, 100).data]
    yield result


def id_events(run: Run, name: str) -> list[tuple[str, str, str]]:
    """(kind, id, watermark) of the missing and found events, each once (a replay may repeat an event id)."""
    seen = {event["id"]: (event["type"].rsplit(".", 1)[1], event["subject"], event["data"]["watermark"])
            for event in run.events[name] if event["type"] != "wayline.recon.metrics"}
    return sorted(seen.values())


def figures(run: Run, name: str) -> dict[tuple[int, str], dict[str, int]]:
    """(window start in s after T0, source) -> its figures and revision, from PostgreSQL."""
    return {((w.window_start - T0_MS) // 1000, w.source): {
        **{k: v for k, v in vars(w.counts).items() if v}, "revision": w.revision} for w in run.windows[name]}


def published(run: Run, name: str) -> list[tuple[int, str, int, float, dict[str, int]]]:
    """(window start in s after T0, source, revision, completeness, its non-zero counts) of every metrics event."""
    counts = ("expected", "matched", "missing", "found", "duplicates", "late", "too_late", "unreadable")
    seen = {}
    for event in run.events[name]:
        if event["type"] == "wayline.recon.metrics":
            data = event["data"]
            start = (int(datetime.fromisoformat(data["window_start"]).timestamp() * 1000) - T0_MS) // 1000
            seen[(start, data["source"], data["revision"])] = (
                data["completeness"], {k: data[k] for k in counts if data[k]})
    return [(*window, *rest) for window, rest in sorted(seen.items())]


def test_records_it_cannot_read_are_counted_per_source_and_window(run: Run) -> None:
    assert id_events(run, "unreadable") == []
    assert figures(run, "unreadable") == {
        (0, ""): {"unreadable": 3, "revision": 1},  # not events: no tenantid, over 1 KiB, not JSON
        (0, "orders"): {"expected": 1, "matched": 1, "unreadable": 2, "revision": 1},  # bad time, no id
        (60, ""): {"unreadable": 1, "revision": 1},  # the events topic's, in the window of its Kafka timestamp
    }
    assert published(run, "unreadable") == [
        (0, "", 1, 100.0, {"unreadable": 3}),
        (0, "orders", 1, 100.0, {"expected": 1, "matched": 1, "unreadable": 2}),
        (60, "", 1, 100.0, {"unreadable": 1}),
    ]
    assert [(w["window_start"], w["source"], w["unreadable"], w["expected"]) for w in run.status["windows"]] == [
        ("2026-03-01T09:01:00.000Z", "", 1, 0), ("2026-03-01T09:00:00.000Z", "", 3, 0),
        ("2026-03-01T09:00:00.000Z", "orders", 2, 1)]
    name = f'reconciliation="{run.status["reconciliation"]["name"]}"'
    assert f'wayline_recon_window_ids{{figure="unreadable",{name},source=""}} 1.0' in run.gauges
    assert f'wayline_recon_window_ids{{figure="unreadable",{name},source="orders"}} 2.0' in run.gauges


def test_each_unreadable_audit_record_is_quarantined_with_its_reason(run: Run) -> None:
    def header(message: Any, key: str) -> str:
        return dict(message.headers())[key].decode()

    name = run.status["reconciliation"]["name"]
    copies = {header(m, "wayline-quarantine-reason"): m for m in run.quarantined}
    assert len(run.quarantined) == len(copies) == 5  # the events topic's record is the event pipelines' to copy
    assert {reason: m.value() for reason, m in copies.items()} == UNREADABLE_AUDIT
    assert {header(m, "wayline-source-topic") for m in run.quarantined} == {run.audit_topic}
    assert {reason: header(m, "wayline-quarantine-detail") for reason, m in copies.items()} == {
        "missing_tenant": "the tenantid extension attribute is missing",
        "oversize": f"value is {len(UNREADABLE_AUDIT['oversize'])} bytes, over the 1024-byte limit",
        "recon_bad_time": f"reconciliation {name}, expected side: data.event_time is not an RFC 3339 date-time",
        "recon_missing_id": f"reconciliation {name}, expected side: no id at data.event_id",
        "not_json": "the value is not valid JSON",
    }


def test_a_window_closes_on_the_reconciliations_watermark_with_its_missing_ids_reported(run: Run) -> None:
    assert id_events(run, "watermark") == [("missing", "w-x", "2026-03-01T09:00:50.000Z")]
    assert published(run, "watermark") == [
        (0, "orders", 1, 50.0, {"expected": 2, "matched": 1, "missing": 1}),
        (0, "orders", 2, 50.0, {"expected": 2, "matched": 1, "missing": 1, "too_late": 1}),
    ]
    assert figures(run, "watermark") == {
        (0, "orders"): {"expected": 2, "matched": 1, "missing": 1, "too_late": 1, "revision": 2},
        (60, "orders"): {"expected": 1, "matched": 1, "revision": 0},
    }
    assert run.watermarks["watermark"] == T0_MS + 50_000
    assert run.missing["watermark"] == ["w-x"]
