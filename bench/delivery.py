"""Benchmark: the delivery job from Kafka to a local receiver, batch and streaming mode.

Everything on this machine: broker, PostgreSQL, the Spark job, and the receiver (its own
process, checking every signature with ``standardwebhooks``). The registry: five
endpoints, each subscribed to 100 of the load generator's 500 event types for every
tenant, so every event is delivered exactly once. Per run, with fresh topics:

- **ceiling**: a plain ``confluent-kafka`` consumer reads the same events (no parsing);
- **batch**: a backlog of events drained by the job in batch mode (max 1,000 or 1 s);
- **streaming**: a backlog drained in streaming mode (one request per event);
- **latency**: streaming mode at a steady produce rate; end-to-end p50/p99 from each
  event's ``time`` to its arrival at the receiver;
- the Spark JVM's peak resident memory through the runs (the backlogs are bursts of
  many seconds of traffic, cut into micro-batches by ``maxOffsetsPerTrigger``).

Rates are events delivered divided by the time from the first to the last request the
receiver got. Run: .venv/bin/python bench/delivery.py [--runs 3] [--batch-events 400000]
It starts its own stack under bench/results/delivery-state and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from toolkit import cli
from toolkit.processes import processes, spark_jvms
from toolkit.receiver import Trust, stats
from toolkit.results import RESULTS, record_results
from toolkit.stack import LOOPBACK, fresh_stack
from toolkit.systems import bench_session, shape
from toolkit.waiting import while_arriving
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.pipelines.delivery import start_delivery
from wayline.registry import subscription
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.stack import loadgen
from wayline.stack.seed import seed

STREAMING_PER_TRIGGER = 10_000
STAGE_DEADLINE_S = 10.0
STALL_S = 300


def java_peak_rss_mb() -> float:
    """Peak resident memory of this process's Spark driver JVM."""
    found = processes()
    return max((found[pid].peak_mb for pid in spark_jvms(found)), default=0.0)


def consume_all(bootstrap: str, topics: list[str], partitions: int, count: int) -> float:
    """Events/s for a plain consumer reading ``count`` records of ``topics`` from the start
    (partitions assigned directly: no group rebalance in the timing)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ceiling", "enable.auto.commit": False})
    started = time.monotonic()
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(partitions)])
    seen = 0
    try:
        while seen < count:
            seen += sum(1 for m in consumer.consume(10_000, timeout=1.0) if m.error() is None)
        return seen / (time.monotonic() - started)
    finally:
        consumer.close()


def one_run(spark: Any, base: Settings, database: Database, receiver_url: str, trust: Trust, run: str,
            mode: subscription.Mode, events: int, rate: float | None) -> dict[str, Any]:
    prefix = f"bench.{run}.{mode}."
    # Streaming mode sends one request per event: a micro-batch must be small enough for
    # its requests to finish within the stage deadline, or they all go to the retry store.
    per_trigger = base.kafka.max_offsets_per_trigger if mode == "batch" else STREAMING_PER_TRIGGER
    settings = base.model_copy(update={
        "kafka": base.kafka.model_copy(update={"event_topic_prefix": prefix, "max_offsets_per_trigger": per_trigger}),
        "delivery": base.delivery.model_copy(update={"batch_topic": f"bench.{run}.batching",
                                                     "stage_deadline_s": STAGE_DEADLINE_S}),
    })
    topics = loadgen.topics(prefix)
    ensure_topics(settings.kafka_bootstrap(), topics, settings.kafka.topic_partitions)
    endpoints = EndpointService.from_settings(settings)
    seeded = seed(database, endpoints, receiver_url, shape(mode, run))
    trust(seeded.secrets)
    factory = loadgen.EventFactory(topic_prefix=prefix, run_id=run)
    result: dict[str, Any] = {"mode": mode, "events": events}
    if rate is None:  # a backlog: produced first, then drained
        loadgen.produce(settings.kafka_bootstrap(), factory.records(events))
        result["ceiling_events_per_s"] = consume_all(settings.kafka_bootstrap(), topics,
                                                     settings.kafka.topic_partitions, events)
    checkpoint = RESULTS / "delivery-state" / "checkpoints" / run / mode
    metrics = DeliveryMetrics()
    job = start_delivery(spark, settings, database, endpoints, metrics, checkpoint=checkpoint)
    started = time.time()
    try:
        if rate is not None:
            loadgen.produce(settings.kafka_bootstrap(), factory.records(events), rate=rate)
        ours = while_arriving(
            lambda: {p: s for p, s in stats(receiver_url).items() if p.startswith(f"/{run}/{mode}/")},
            lambda paths: sum(s["events"] for s in paths.values()), events, stall_s=STALL_S,
            alive=lambda: job.isActive)
        assert job.exception() is None, job.exception()
        # Where each micro-batch's time went (addBatch is the foreachBatch body).
        result["micro_batches"] = [
            {"rows": p["numInputRows"], "add_batch_ms": p["durationMs"].get("addBatch"),
             "trigger_ms": p["durationMs"].get("triggerExecution")}
            for p in job.matching.recentProgress if p["numInputRows"]
        ]
        result["phase_seconds"] = dict(metrics.totals().phase_seconds)
    finally:
        job.stop()
    delivered = sum(s["events"] for s in ours.values())
    first = min(s["first_at"] for s in ours.values())
    last = max(s["last_at"] for s in ours.values())
    result |= {
        "delivered": delivered,
        "requests": sum(s["requests"] for s in ours.values()),
        "bad_signatures": sum(s["rejected"] for s in ours.values()),
        "events_per_s": delivered / (last - first),
        "job_wall_s": last - started,
        "latency_p50_s": statistics.median(s["latency_p50_s"] for s in ours.values()),
        "latency_p99_s": max(s["latency_p99_s"] for s in ours.values()),
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--batch-events", type=int, default=400_000)
    parser.add_argument("--streaming-events", type=int, default=100_000)
    parser.add_argument("--latency-rate", type=float, default=2000)
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument("--measures", default="batch,streaming,latency", help="which of the three to run")
    args = parser.parse_args()

    with fresh_stack(RESULTS / "delivery-state", registry={"url_allow_list": LOOPBACK}) as (settings, database):
        results, peak_mb = run_all(settings, database, args)
    summary = {"spark_jvm_peak_rss_mb": peak_mb, "runs": results}
    record_results(f"delivery-{int(time.time())}", summary, args.out)
    print(json.dumps(summary, indent=2))


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """Every run of the chosen measures; the results, and the Spark JVM's peak resident memory."""
    results: list[dict[str, Any]] = []
    with bench_session(settings, database, args) as bench:
        for n in range(args.runs):
            run = f"r{n}{int(time.time())}"
            measures = args.measures.split(",")
            if "batch" in measures:
                results.append(one_run(bench.spark, settings, database, bench.receiver_url, bench.trust, run, "batch",
                                       args.batch_events, None))
            if "streaming" in measures:
                results.append(one_run(bench.spark, settings, database, bench.receiver_url, bench.trust, run,
                                       "streaming", args.streaming_events, None))
            if "latency" in measures:
                results.append(one_run(bench.spark, settings, database, bench.receiver_url, bench.trust, run + "l",
                                       "streaming", int(args.latency_rate * args.latency_seconds), args.latency_rate))
        # Before the session stops its JVM.
        peak_mb = java_peak_rss_mb()
    return results, peak_mb


if __name__ == "__main__":
    main()
