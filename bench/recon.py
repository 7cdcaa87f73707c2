"""Benchmark: the recon job over ``--ids`` audited ids, against a plain read-and-parse of the same topics.

The streams: one expected (audit) record and one actual event per id, over one hour of
simulated event time, on two topics of two partitions; 0.1 % of the actuals are left out
(they are the missing ids). The audit records carry the audited id, time and source in
``data``; the events are CloudEvents read by their attributes. With ``m`` = 2 hours every
id stays in flight until the end: ``--ids`` 1,000,000 means 1,000,000 ids (two million
records) in state.

Each run starts a fresh query on a fresh checkpoint over the same records already in
Kafka, so the rate is the job's, not the producer's: records / the summed durations of
the micro-batches that read them (``maxOffsetsPerTrigger`` cuts the input into several).
The baseline in the same session reads and parses the same topics (JSON parse, the side's
id, source and time read by the same JVM expressions) and counts them. Medians of
``--runs``. Also reported: the state after the hour (rows and bytes of the stateful
operator), and the time from a missing id's deadline to its ``missing`` event: after the
backlog, an expected id is produced, then a heartbeat that moves the watermark past its
deadline; the clock runs from the heartbeat's send to the event's arrival.

Run: .venv/bin/python bench/recon.py [--ids 1000000] [--runs 3]
It starts its own stack under bench/results/recon-state and stops it at the end.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer

from toolkit import cli
from toolkit.produce import produce_all
from toolkit.results import RESULTS, record_results
from toolkit.stack import fresh_stack
from toolkit.waiting import wait_until
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.recon import reconciliation as service
from wayline.registry.access import ADMIN
from wayline.registry.db import Database

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
AUDIT, EVENTS, OUT = "bench.recon.audit", "bench.recon.events", "bench.recon.out"
HEARTBEAT = "wayline.recon.heartbeat"


def records_of(ids: int) -> Iterator[tuple[str, bytes, None]]:
    """Per id its audit record and, for all but one in 1,000, its event a second later."""
    for n in range(ids):
        at = T0 + timedelta(seconds=3600 * n / ids)
        yield AUDIT, orjson.dumps({
            "specversion": "1.0", "id": f"a{n}", "source": "auditor", "type": "audit", "tenantid": "t",
            "time": at.isoformat(), "data": {"audited_id": f"e{n}", "audited_time": at.isoformat(), "system": "s"},
        }), None
        if n % 1000 != 999:
            yield EVENTS, orjson.dumps({
                "specversion": "1.0", "id": f"e{n}", "source": "s", "type": "order", "tenantid": "t",
                "time": (at + timedelta(seconds=1)).isoformat(), "data": {"n": n},
            }), None


def reconcile(database: Database, settings: Settings, name: str) -> str:
    side = {"topics": [AUDIT], "id": "data.audited_id", "time": "data.audited_time", "source": "data.system"}
    with database.transaction() as session:
        for row in service.running(session):
            session.delete(row)
        return service.create(session, ADMIN, service.ReconciliationIn.model_validate({
            "name": name, "output_topic": OUT,
            "expected": {"role": "producer-expected", **side}, "actual": {"role": "actual", "topics": [EVENTS]},
            "periods": {"o": 60, "n": 30, "m": 7200, "z": 3600},
        }), service.OutputTopics.from_settings(settings)).id


class Progress:
    """Every micro-batch's progress, by batch id (recentProgress keeps only the last 100)."""

    def __init__(self) -> None:
        self.by_batch: dict[int, dict[str, Any]] = {}

    def poll(self, query) -> int:
        for progress in query.recentProgress:
            self.by_batch[progress["batchId"]] = progress
        return sum(p["numInputRows"] for p in self.by_batch.values())

    def summary(self, records: int) -> dict[str, Any]:
        busy = [p for p in self.by_batch.values() if p["numInputRows"] > 0]
        seconds = sum(p["durationMs"]["triggerExecution"] for p in busy) / 1000
        states = [(p.get("stateOperators") or [{}])[0] for p in busy]
        return {"rate": records / seconds, "seconds": seconds, "batches": len(busy),
                # Where a micro-batch's time went: Spark's phases, and the state store's own share.
                "phases_s": {phase: sum(p["durationMs"].get(phase, 0) for p in busy) / 1000
                             for phase in ("addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset")},
                "state_commit_s": sum(s.get("commitTimeMs", 0) for s in states) / 1000,
                "state_updates_s": sum(s.get("allUpdatesTimeMs", 0) for s in states) / 1000}


def wait_for(query, progress: Progress, records: int, timeout: float = 1800) -> None:
    def read_all() -> bool:
        if query.exception() is not None:
            raise RuntimeError(query.exception())
        return progress.poll(query) >= records

    wait_until(read_all, f"the query to read {records} records", timeout)


def baseline_once(spark, settings: Settings, database: Database, records: int, checkpoint: Path) -> dict[str, Any]:
    from wayline.pipelines.envelope import parse_events
    from wayline.pipelines.recon_plan import load_recon_set, routed_records, topics_pattern
    from wayline.pipelines.source import read_kafka

    shutil.rmtree(checkpoint, ignore_errors=True)
    specs = load_recon_set(database).specs
    routed = routed_records(parse_events(read_kafka(spark, settings, topics_pattern(specs)), settings.envelope),
                            specs, settings)
    query = (routed.writeStream.option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=f"{int(settings.recon.trigger_interval_s * 1000)} milliseconds")
             .foreachBatch(lambda batch, _id: batch.count()).start())
    progress = Progress()
    try:
        wait_for(query, progress, records)
    finally:
        query.stop()
    return progress.summary(records)


def recon_once(spark, settings: Settings, database: Database, records: int, checkpoint: Path,
               latency: bool) -> dict[str, Any]:
    from wayline.pipelines.recon_job import ReconJob

    shutil.rmtree(checkpoint, ignore_errors=True)
    job = ReconJob(spark, settings, database, checkpoint).start()
    progress = Progress()
    try:
        wait_for(job.query, progress, records)
        result = progress.summary(records)
        state = (job.query.lastProgress.get("stateOperators") or [{}])[0]
        custom = state.get("customMetrics") or {}
        result.update(state_rows=state.get("numRowsTotal", 0), state_bytes=state.get("memoryUsedBytes", 0),
                      rocksdb_bytes=custom.get("rocksdbSstFileSize", 0) + custom.get("rocksdbTotalSizeOfL0Files", 0),
                      missing=job.counters.missing)
        if latency:
            result["deadline_to_missing_s"] = [deadline_to_missing(settings, n) for n in range(3)]
        return result
    finally:
        job.stop()


def deadline_to_missing(settings: Settings, n: int) -> float:
    """An expected id past the backlog, then a heartbeat past its deadline: seconds to its ``missing``."""
    bootstrap = settings.kafka_bootstrap()
    at = T0 + timedelta(hours=2 + n)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "auto.offset.reset": "latest"})
    consumer.subscribe([OUT])
    while not consumer.assignment():
        consumer.poll(0.2)
    producer = Producer({"bootstrap.servers": bootstrap})
    wanted = f"late-{n}"
    producer.produce(AUDIT, value=orjson.dumps({
        "specversion": "1.0", "id": f"x{n}", "source": "auditor", "type": "audit", "tenantid": "t",
        "time": at.isoformat(), "data": {"audited_id": wanted, "audited_time": at.isoformat(), "system": "s"}}))
    producer.flush(30)
    time.sleep(3 * settings.recon.trigger_interval_s)  # the id is in state before its deadline comes
    producer.produce(EVENTS, value=orjson.dumps({
        "specversion": "1.0", "id": f"hb{n}", "source": "s", "type": HEARTBEAT, "tenantid": "t",
        "time": (at + timedelta(seconds=61)).isoformat()}))
    producer.flush(30)
    sent = time.monotonic()
    try:
        while time.monotonic() - sent < 120:
            message = consumer.poll(0.2)
            if message is not None and not message.error() and orjson.loads(message.value()).get("subject") == wanted:
                return time.monotonic() - sent
        raise RuntimeError("no missing event within 120 s")
    finally:
        consumer.close()
        producer.close()


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--ids", type=int, default=1_000_000)
    args = parser.parse_args()
    state = RESULTS / "recon-state"
    with fresh_stack(state, kafka={"max_offsets_per_trigger": 200_000}) as (settings, database):
        from wayline.stack.spark import spark_session

        ensure_topics(settings.kafka_bootstrap(), [AUDIT, EVENTS, OUT], 2)
        started = time.monotonic()
        records = produce_all(settings.kafka_bootstrap(), records_of(args.ids))
        print(f"produced {records:,} records in {time.monotonic() - started:.0f} s")
        spark = spark_session(settings)
        baselines, recons = [], []
        for run in range(args.runs):
            reconcile(database, settings, f"bench-{run}")
            baselines.append(baseline_once(spark, settings, database, records, state / f"cp-base-{run}"))
            print("baseline", baselines[-1])
            recons.append(recon_once(spark, settings, database, records, state / f"cp-recon-{run}",
                                     latency=run == args.runs - 1))
            print("recon", recons[-1])
        spark.stop()
        result = {
            "ids": args.ids, "records": records, "runs": args.runs,
            "baseline_rate": statistics.median(r["rate"] for r in baselines),
            "recon_rate": statistics.median(r["rate"] for r in recons),
            "state_rows": recons[-1]["state_rows"], "state_bytes": recons[-1]["state_bytes"],
            "rocksdb_bytes": recons[-1]["rocksdb_bytes"],
            "missing": recons[-1]["missing"],
            "deadline_to_missing_s": statistics.median(recons[-1]["deadline_to_missing_s"]),
            "baselines": baselines, "recons": recons,
        }
    print(json.dumps(result, indent=1, default=str))
    record_results("recon", result, args.out)


if __name__ == "__main__":
    main()
