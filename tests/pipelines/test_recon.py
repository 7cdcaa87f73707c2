"""The recon job end to end: reconciliations created through the admin API (real HTTP, real
PostgreSQL), both streams produced to the real broker, the outputs read back from Kafka
and from the job's tables.

One query runs for the module (a Spark query is the expensive part) over several
reconciliations, one per scenario, each on its own two topics. The streams advance in
acts; each act is produced whole and worked off before the next (the query's progress
reaches the topics' end offsets: ``processAllAvailable`` never returns here, since a
processing-time stateful operator runs a micro-batch on every trigger), and within an act
no record is far enough from another to change the outcome of how the act splits into
micro-batches. So every figure below is exact. The job is stopped and started again on its
checkpoint between acts 2 and 3 (the stop interrupts a micro-batch, which the new query
replays).

Periods (most scenarios): o = 60 s, n = 10 s, m = 120 s, z = 1 h. The expected side reads
the audited id, time and source from ``data``; the actual side uses CloudEvents attributes.
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
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)  # a window boundary
T0_MS = int(T0.timestamp() * 1000)
HEARTBEAT = "wayline.recon.heartbeat"
PERIODS = {"o": 60, "n": 10, "m": 120, "z": 3600}
SCENARIOS = ("present", "never", "found", "after_m", "out_of_order", "duplicates", "late_audit", "stalled",
             "heartbeats", "corrected", "split")


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def expected(audited: str, seconds: float) -> bytes:
    return orjson.dumps({
        "specversion": "1.0", "id": f"audit-{audited}-{time.time_ns()}", "source": "auditor", "type": "audit.record",
        "tenantid": "t-rc", "time": at(seconds + 0.5),
        "data": {"audited_id": audited, "audited_time": at(seconds), "system": "orders"},
    })


def actual(event_id: str, seconds: float) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": event_id, "source": "orders", "type": "order.created",
                         "tenantid": "t-rc", "time": at(seconds), "data": {"n": 1}})


def heartbeat(seconds: float) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": f"hb-{time.time_ns()}", "source": "orders", "type": HEARTBEAT,
                         "tenantid": "t-rc", "time": at(seconds)})


# Each act: scenario -> (expected-topic records, actual-topic records).
ACTS: list[dict[str, tuple[list[bytes], list[bytes]]]] = [
    {
        "present": ([expected("a1", 1), expected("a2", 2), expected("a3", 3)],
                    [actual("a1", 2), actual("a2", 3), actual("a3", 4)]),
        "never": ([expected("m1", 1), expected("m2", 2)], [actual("m2", 2)]),
        "found": ([expected("f1", 1)], []),
        "after_m": ([expected("g1", 1), expected("g2", 2)], []),
        "out_of_order": ([expected("o2", 8)], [actual("o1", 5)]),
        "duplicates": ([expected("d1", 1), expected("d1", 1)], [actual("d1", 2), actual("d1", 2), actual("d1", 3)]),
        "late_audit": ([], [actual("l1", 1)]),
        "stalled": ([expected("s1", 1)], []),
        "heartbeats": ([], [heartbeat(10)]),
        "corrected": ([expected("c1", 1), expected("c2", 2)], [actual("c1", 1)]),
        # p1 and p3 pair inside the micro-batch (p3 with a duplicate beside it), p2's actual comes in the next.
        "split": ([expected("p1", 1), expected("p2", 3), expected("p3", 4)],
                  [actual("p1", 2), actual("p3", 4), actual("p3", 4)]),
    },
    {
        "found": ([], [heartbeat(30)]),
        "after_m": ([], [heartbeat(30)]),
        "out_of_order": ([expected("o1", 2)], [actual("o2", 4)]),
        "late_audit": ([], [heartbeat(30)]),
        "corrected": ([], [heartbeat(85)]),  # window 0 closes: c2 missing, revision 1
        "split": ([], [actual("p2", 4)]),
    },
    # -- the job restarts on its checkpoint here --
    {
        "found": ([], [actual("f1", 35)]),
        "after_m": ([], [actual("g1", 125)]),  # 124 s after its expected time: finds nothing
        "late_audit": ([expected("l1", 1)], []),  # behind the watermark, within m
        "corrected": ([], [actual("c2", 3)]),  # late, within m: found, window 0 revision 2
    },
    {
        **{name: ([], [heartbeat(200)]) for name in (
            "present", "never", "found", "after_m", "out_of_order", "duplicates", "late_audit", "split")},
        "heartbeats": ([], [heartbeat(100)]),
        "corrected": ([], [heartbeat(300)]),
    },
    {
        "after_m": ([], [actual("g2", 2)]),  # g2's state is gone: too late, counted
    },
]


@dataclass
class Run:
    ids: dict[str, str] = field(default_factory=dict)  # scenario -> reconciliation id
    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    windows: dict[str, list[Any]] = field(default_factory=dict)
    watermarks: dict[str, int | None] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0


@pytest.fixture(scope="module")
def run(settings: Settings, spark, database, admin_api: str, admin_key: str, tmp_path_factory) -> Iterator[Run]:
    import httpx

    from wayline.pipelines.recon_job import ReconJob
    from wayline.recon import store

    prefix = f"rc{time.time_ns() % 10**8}"
    output = f"{prefix}.out"
    bootstrap = settings.kafka_bootstrap()
    topics = {name: (f"{prefix}.{name}.audit", f"{prefix}.{name}.events") for name in SCENARIOS}
    inputs = [t for pair in topics.values() for t in pair]
    ensure_topics(bootstrap, inputs + [output], 2)
    result = Run()
    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    for name in SCENARIOS:
        periods = {"o": 60, "n": 1, "m": 10, "z": 2} if name == "stalled" else PERIODS
        created = api.post("/reconciliations", json={
            "name": f"{prefix}-{name}", "output_topic": output, "periods": periods,
            "expected": {"role": "producer-expected", "topics": [topics[name][0]], "id": "data.audited_id",
                         "time": "data.audited_time", "source": "data.system"},
            "actual": {"role": "actual", "pattern": topics[name][1].replace(".", "\\.")},
        })
        assert created.status_code == 201, created.text
        result.ids[name] = created.json()["id"]

    checkpoint = tmp_path_factory.mktemp("recon-checkpoint")
    job_settings = settings.model_copy(update={"recon": settings.recon.model_copy(update={
        "trigger_interval_s": 0.5, "buckets": 4})})
    producer = Producer({"bootstrap.servers": bootstrap})
    job = ReconJob(spark, job_settings, database, checkpoint).start()
    try:
        for number, act in enumerate(ACTS):
            if number == 2:
                job.stop()
                job = ReconJob(spark, job_settings, database, checkpoint).start()
            for name, (audit_records, event_records) in act.items():
                for value in audit_records:
                    producer.produce(topics[name][0], value=value)
                for value in event_records:
                    producer.produce(topics[name][1], value=value)
            assert producer.flush(30) == 0
            caught_up(job, end_offsets(bootstrap, inputs))
        # A reconciliation created while the job runs: the query restarts on its checkpoint.
        added = (f"{prefix}.added.audit", f"{prefix}.added.events")
        ensure_topics(bootstrap, list(added), 2)
        response = api.post("/reconciliations", json={
            "name": f"{prefix}-added", "output_topic": output, "periods": PERIODS,
            "expected": {"role": "consumer-expected", "topics": [added[0]]},
            "actual": {"role": "actual", "topics": [added[1]]},
        })
        assert response.status_code == 201, response.text
        result.ids["added"] = response.json()["id"]
        wait_for(lambda: job.counters.restarts > 0, "the query to restart on the new reconciliation", 120)
        producer.produce(added[0], value=actual("x1", 1))  # an audit record read by its attributes
        producer.produce(added[1], value=heartbeat(200))
        assert producer.flush(30) == 0
        caught_up(job, end_offsets(bootstrap, [*inputs, *added]))
        result.restarts = job.counters.restarts

        def stalled_reported() -> bool:
            return any(e["data"]["reconciliation_id"] == result.ids["stalled"] for e in read_all(bootstrap, output))

        # The stalled stream got nothing since act 1: its missing comes from processing time.
        wait_for(stalled_reported, "the stalled stream's events", 60)
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
    result.status = api.get(f"/reconciliations/{result.ids['never']}/status").json()
    result.status["missing"] = api.get(f"/reconciliations/{result.ids['never']}/missing",
                                       params={"limit": 1}).json()
    yield result


def id_events(run: Run, name: str) -> list[tuple[str, str]]:
    """(kind, id) of the missing and found events, each once (a replay may repeat an event id)."""
    seen = {}
    for event in run.events[name]:
        if event["type"] != "wayline.recon.metrics":
            seen[event["id"]] = (event["type"].rsplit(".", 1)[1], event["subject"])
    return sorted(seen.values())


def figures(run: Run, name: str) -> dict[int, dict[str, int]]:
    """Window start (s after T0) -> its figures and revision, from PostgreSQL."""
    return {(w.window_start - T0_MS) // 1000: {**{k: v for k, v in vars(w.counts).items() if v}, "revision": w.revision}
            for w in run.windows[name]}


def published(run: Run, name: str) -> list[tuple[int, int, float]]:
    """(window start in s after T0, revision, completeness) of every metrics event."""
    return sorted({((int(datetime.fromisoformat(e["data"]["window_start"]).timestamp() * 1000) - T0_MS) // 1000,
                    e["data"]["revision"], e["data"]["completeness"])
                   for e in run.events[name] if e["type"] == "wayline.recon.metrics"})


def test_all_present(run: Run) -> None:
    assert id_events(run, "present") == []
    assert figures(run, "present") == {0: {"expected": 3, "matched": 3, "revision": 1}}
    assert published(run, "present") == [(0, 1, 100.0)]


def test_missing_and_never_found(run: Run) -> None:
    assert id_events(run, "never") == [("missing", "m1")]
    assert figures(run, "never") == {0: {"expected": 2, "matched": 1, "missing": 1, "revision": 1}}
    assert published(run, "never") == [(0, 1, 50.0)]
    assert run.missing["never"] == ["m1"]


def test_missing_then_found_within_m(run: Run) -> None:
    assert id_events(run, "found") == [("found", "f1"), ("missing", "f1")]
    assert figures(run, "found") == {0: {"expected": 1, "matched": 1, "found": 1, "revision": 1}}
    assert run.missing["found"] == []


def test_an_actual_after_m_finds_nothing_and_a_record_past_its_state_is_too_late(run: Run) -> None:
    assert id_events(run, "after_m") == [("missing", "g1"), ("missing", "g2")]
    assert figures(run, "after_m") == {0: {"expected": 2, "missing": 2, "too_late": 1, "revision": 2}}
    assert published(run, "after_m") == [(0, 1, 0.0), (0, 2, 0.0)]
    assert run.missing["after_m"] == ["g1", "g2"]


def test_out_of_order_within_n(run: Run) -> None:
    assert id_events(run, "out_of_order") == []
    assert figures(run, "out_of_order") == {0: {"expected": 2, "matched": 2, "revision": 1}}


def test_duplicates_on_either_side(run: Run) -> None:
    assert id_events(run, "duplicates") == []
    assert figures(run, "duplicates") == {0: {"expected": 1, "matched": 1, "duplicates": 3, "revision": 1}}


def test_a_pair_inside_a_micro_batch_and_one_split_across_two_count_alike(run: Run) -> None:
    assert id_events(run, "split") == []
    assert figures(run, "split") == {0: {"expected": 3, "matched": 3, "duplicates": 1, "revision": 1}}
    assert published(run, "split") == [(0, 1, 100.0)]


def test_a_late_audit_record_matches(run: Run) -> None:
    assert id_events(run, "late_audit") == []
    assert figures(run, "late_audit") == {0: {"expected": 1, "matched": 1, "late": 1, "revision": 1}}


def test_a_stalled_stream_reports_missing_after_z(run: Run) -> None:
    assert id_events(run, "stalled") == [("missing", "s1")]
    assert run.missing["stalled"] == ["s1"]


def test_heartbeats_only_move_the_watermark(run: Run) -> None:
    assert run.events["heartbeats"] == []
    assert run.windows["heartbeats"] == []
    assert run.watermarks["heartbeats"] == T0_MS + 90_000


def test_a_corrected_window_replaces_the_earlier_row_with_a_new_revision(run: Run) -> None:
    assert id_events(run, "corrected") == [("found", "c2"), ("missing", "c2")]
    assert figures(run, "corrected") == {
        0: {"expected": 2, "matched": 2, "found": 1, "late": 1, "revision": 2}}
    assert published(run, "corrected") == [(0, 1, 50.0), (0, 2, 100.0)]
    assert run.watermarks["corrected"] == T0_MS + 290_000


def test_a_reconciliation_created_while_the_job_runs_is_picked_up(run: Run) -> None:
    assert run.restarts == 1
    assert id_events(run, "added") == [("missing", "x1")]
    assert figures(run, "added") == {0: {"expected": 1, "missing": 1, "revision": 1}}


def test_the_status_view(run: Run) -> None:
    assert run.status["missing_now"] == 1
    assert [(w["source"], w["expected"], w["completeness"], w["revision"]) for w in run.status["windows"]] == [
        ("orders", 2, 50.0, 1)]
    assert run.status["missing"]["data"][0]["id"] == "m1"
