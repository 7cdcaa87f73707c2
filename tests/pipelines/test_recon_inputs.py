"""The recon job on the real broker with 16 buckets: one clock per reconciliation across its buckets.

As in ``test_recon.py``: reconciliations created through the admin API, both streams
produced to the real broker in acts (each worked off before the next), the outputs read
back from Kafka and PostgreSQL, every figure exact.

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

from tests.recon.streams import caught_up, end_offsets, read_all
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)  # a window boundary
T0_MS = int(T0.timestamp() * 1000)
BUCKETS = 16
# Their buckets (pmod(xxhash64(id), 16)), checked against Spark by the fixture.
IDS = {"w-x": 3, "w-y": 10, "w-other": 4}
SCENARIOS = {"watermark": {"o": 10, "n": 10, "m": 30, "z": 3600}}


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


# Each act: scenario -> (expected-topic records, actual-topic records).
ACTS: list[dict[str, tuple[list[bytes], list[bytes]]]] = [
    {"watermark": ([expected("w-x", 1), expected("w-y", 2)], [actual("w-y", 2)])},
    {"watermark": ([expected("w-other", 60)], [actual("w-other", 60)])},  # watermark 50 s: w-x's window closes
    {"watermark": ([], [actual("w-x", 1.5)])},  # 1.5 + m <= 50: too late
]


@dataclass
class Run:
    ids: dict[str, str] = field(default_factory=dict)  # scenario -> reconciliation id
    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    windows: dict[str, list[Any]] = field(default_factory=dict)
    watermarks: dict[str, int | None] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def run(settings: Settings, spark, database, admin_api: str, admin_key: str, tmp_path_factory) -> Iterator[Run]:
    import httpx
    from pyspark.sql import functions as F

    from wayline.pipelines.recon import ReconJob
    from wayline.recon import store

    buckets = spark.createDataFrame([(id_,) for id_ in IDS], "id string").select(
        "id", F.pmod(F.xxhash64("id"), F.lit(BUCKETS)).alias("bucket")).collect()
    assert {row.id: row.bucket for row in buckets} == IDS

    prefix = f"ri{time.time_ns() % 10**8}"
    output = f"{prefix}.out"
    bootstrap = settings.kafka_bootstrap()
    topics = {name: (f"{prefix}.{name}.audit", f"{prefix}.{name}.events") for name in SCENARIOS}
    inputs = [t for pair in topics.values() for t in pair]
    ensure_topics(bootstrap, inputs + [output], 2)
    result = Run()
    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    for name, periods in SCENARIOS.items():
        created = api.post("/reconciliations", json={
            "name": f"{prefix}-{name}", "output_topic": output, "periods": periods,
            "expected": {"role": "producer-expected", "topics": [topics[name][0]], "id": "data.audited_id",
                         "time": "data.audited_time", "source": "data.system"},
            "actual": {"role": "actual", "topics": [topics[name][1]]},
        })
        assert created.status_code == 201, created.text
        result.ids[name] = created.json()["id"]

    job_settings = settings.model_copy(update={"recon": settings.recon.model_copy(update={
        "trigger_interval_s": 0.5, "buckets": BUCKETS})})
    producer = Producer({"bootstrap.servers": bootstrap})
    job = ReconJob(spark, job_settings, database, tmp_path_factory.mktemp("recon-inputs")).start()
    try:
        for act in ACTS:
            for name, (audit_records, event_records) in act.items():
                for value in audit_records:
                    producer.produce(topics[name][0], value=value)
                for value in event_records:
                    producer.produce(topics[name][1], value=value)
            assert producer.flush(30) == 0
            caught_up(job, end_offsets(bootstrap, inputs))
    finally:
        job.stop()
        producer.close()
    assert job.exception() is None
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


def figures(run: Run, name: str) -> dict[int, dict[str, int]]:
    """Window start (s after T0) -> its figures and revision, from PostgreSQL."""
    return {(w.window_start - T0_MS) // 1000: {**{k: v for k, v in vars(w.counts).items() if v}, "revision": w.revision}
            for w in run.windows[name]}


def published(run: Run, name: str) -> list[tuple[int, int, float, dict[str, int]]]:
    """(window start in s after T0, revision, completeness, its non-zero counts) of every metrics event."""
    counts = ("expected", "matched", "missing", "found", "duplicates", "late", "too_late")
    seen = {}
    for event in run.events[name]:
        if event["type"] == "wayline.recon.metrics":
            data = event["data"]
            start = (int(datetime.fromisoformat(data["window_start"]).timestamp() * 1000) - T0_MS) // 1000
            seen[(start, data["revision"])] = (data["completeness"], {k: data[k] for k in counts if data[k]})
    return [(start, revision, *rest) for (start, revision), rest in sorted(seen.items())]


def test_a_window_closes_on_the_reconciliations_watermark_with_its_missing_ids_reported(run: Run) -> None:
    assert id_events(run, "watermark") == [("missing", "w-x", "2026-03-01T09:00:50.000Z")]
    assert published(run, "watermark") == [
        (0, 1, 50.0, {"expected": 2, "matched": 1, "missing": 1}),
        (0, 2, 50.0, {"expected": 2, "matched": 1, "missing": 1, "too_late": 1}),
    ]
    assert figures(run, "watermark") == {
        0: {"expected": 2, "matched": 1, "missing": 1, "too_late": 1, "revision": 2},
        60: {"expected": 1, "matched": 1, "revision": 0},
    }
    assert run.watermarks["watermark"] == T0_MS + 50_000
    assert run.missing["watermark"] == ["w-x"]
