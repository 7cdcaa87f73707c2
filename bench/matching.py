"""Benchmark: the senders engine's matching query (issue 13), produce → work-topic append.

Three *systems* read the same traffic, one after the other in one run, on one Spark
session (``local[4]``: the real-time query's two partitions, the batching query's
tasks; see ``wayline.pipelines.matching_job.slots_needed``):

- **floor**: a micro-batch query with the matching query's source, trigger and sink,
  copying each record's value to a topic unchanged: Spark's own cost per micro-batch;
- **micro_batch**: :class:`~wayline.pipelines.matching_job.MatchingJob` with
  ``delivery.matching_trigger = "micro_batch"``;
- **realtime**: the same job under ``"realtime"`` (checkpoint every
  ``delivery.realtime_checkpoint_s``, default 300 s).

Registry: five endpoints, each subscribed to 100 of 500 event types for every tenant,
streaming mode, so every event makes one request. Latency of an event: the broker's
append time of its output record (the topics use ``LogAppendTime``) minus the time its
producer stamped into it (``data.sent_ms``), both this machine's clock; the first
``WARMUP_S`` seconds are not counted.

*Scenarios* (``--scenarios``):

- ``steady``: each of ``--rates`` events/s for ``--seconds``: p50/p99;
- ``backlog``: ``--backlog-events`` produced first, then the system started: records/s
  from its start to the last append, and from the first append to the last;
- ``swap``: 300 events/s; half-way, a new endpoint and subscription for every type: from
  the registry commit to the first request routed to it (the running query reading the
  new routing table), and how many requests were routed twice around the change.

    # from the checkout, WAYLINE_SPARK__DRIVER_MEMORY=1g WAYLINE_STACK__BROKER_HEAP=512m
    .venv/bin/python bench/matching.py --runs 1 --rates 300 1000 5000 --seconds 30

Each result also has the query's batches (rows, whole time, planning and run, from Spark's
progress), how many classes Janino compiled while it ran, and the Spark JVM's CPU (it runs
nothing else meanwhile): ``jvm_cpu_s`` from the system's start to its last append and, per
event it appended, ``jvm_cpu_us_per_event`` (for ``backlog``, from its first append to its last:
the drain alone, without the query's start).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from toolkit import cli
from toolkit.codegen import compilations
from toolkit.processes import CpuTimeline, processes, spark_jvms
from toolkit.results import record_results
from toolkit.stack import LOOPBACK, fresh_stack
from toolkit.stats import quantile
from toolkit.topics import read_topic
from toolkit.waiting import holds_within, wait_planned
from wayline.core.secret import Secret
from wayline.core.settings import DeliverySettings, Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.stack.loadgen import paced
from wayline.stack.spark import spark_session

TYPES = 500
ENDPOINTS = 5
PARTITIONS = 2
WARMUP_S = 5.0
SYSTEMS = ("floor", "micro_batch", "realtime")
SCENARIOS = ("steady", "backlog", "swap")
RECEIVER = "http://127.0.0.1:9"  # never called: nothing here sends


def seed(database: Database, endpoints: EndpointService) -> str:
    """The registry shape; returns the customer id."""
    with database.transaction() as s:
        for t in range(TYPES):
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=f"bench.t{t}"))
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id="bt")])
        owner = customer.create(s, ADMIN, customer.CustomerIn(name="bench"))
        for e in range(ENDPOINTS):
            endpoint = endpoints.create(s, ADMIN, EndpointIn(url=f"{RECEIVER}/e{e}", customer_id=owner.id,
                                                             secret=Secret.generate().text))
            subscription.create(s, ADMIN, subscription.SubscriptionIn(
                endpoint_id=endpoint.id, event_types=[f"bench.t{t}" for t in range(e, TYPES, ENDPOINTS)]))
    return owner.id


def add_subscription(database: Database, endpoints: EndpointService, owner: str) -> tuple[str, str, float]:
    """A new endpoint subscribed to the first endpoint's 100 types (one event in five);
    the endpoint's and the subscription's ids and the commit time."""
    with database.transaction() as s:
        endpoint = endpoints.create(s, ADMIN, EndpointIn(url=f"{RECEIVER}/added-{uuid.uuid4().hex[:6]}",
                                                         customer_id=owner, secret=Secret.generate().text))
        added = subscription.create(s, ADMIN, subscription.SubscriptionIn(
            endpoint_id=endpoint.id, event_types=[f"bench.t{t}" for t in range(0, TYPES, ENDPOINTS)]))
    return endpoint.id, added.id, time.time()


def remove_subscription(database: Database, subscription_id: str) -> None:
    """The next measurement starts from the seeded registry."""
    with database.transaction() as s:
        subscription.delete(s, ADMIN, subscription_id)


def settings_for(base: Settings, system: str, tag: str, checkpoint_s: float, audit: bool) -> Settings:
    return base.model_copy(update={
        "kafka": base.kafka.model_copy(update={"event_topic_prefix": f"events.{tag}.",
                                               "alert_topic_prefix": f"alerts.{tag}.", "topic_partitions": PARTITIONS}),
        "delivery": base.delivery.model_copy(update={
            # The query on the source topics itself: no intake processes run here.
            "engine": "senders", "matching_trigger": "micro_batch" if system == "floor" else system, "intake": "off",
            "work_topic": f"wayline.work.{tag}", "work_partitions": PARTITIONS,
            "batch_topic": f"wayline.batching.{tag}", "realtime_checkpoint_s": checkpoint_s}),
        "audit": base.audit.model_copy(update={"enabled": audit}),
    })


def create_topics(settings: Settings) -> str:
    source = f"{settings.kafka.event_topic_prefix}load"
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap()})
    futures = admin.create_topics([
        NewTopic(source, PARTITIONS, 1),
        NewTopic(settings.delivery.work_topic, PARTITIONS, 1, config={"message.timestamp.type": "LogAppendTime"}),
    ])
    for future in futures.values():
        future.result()
    return source


class Running:
    def __init__(self, stop: Any, failure: Any, progress: Any) -> None:
        self.stop, self.failure, self.progress = stop, failure, progress


def start(system: str, spark: Any, settings: Settings, database: Database, checkpoint: Path) -> Running:
    if system == "floor":
        from wayline.core.topics import delivered_topic_pattern
        from wayline.pipelines.source import read_kafka

        query = (read_kafka(spark, settings, delivered_topic_pattern(settings),
                            max_offsets_per_trigger=settings.delivery.max_offsets_per_trigger)
                 .select("value").writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", settings.kafka_bootstrap())
                 .option("topic", settings.delivery.work_topic)
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime=f"{round(settings.delivery.trigger_interval_s * 1000)} milliseconds")
                 .start())
        return Running(query.stop, query.exception, lambda: query.recentProgress)
    from wayline.pipelines.matching_job import MatchingJob

    job = MatchingJob(spark, settings, database, EndpointService.from_settings(settings), DeliveryMetrics(),
                      checkpoint).start()
    return Running(job.stop, job.exception,
                   lambda: job.matching.query.recentProgress if job.matching.query is not None else [])


def jvm_cpu_s(cpu: CpuTimeline, start: float, end: float) -> float:
    """CPU seconds the Spark JVM used between the samples nearest ``start`` and ``end``."""
    return round(sum(cpu.between(start, end)["cpu_s_by_role"].values()), 2)


def batch_times(progress: list[Any]) -> list[dict[str, Any]]:
    """Per batch of the current query: its rows and, in ms, its whole time, its planning
    and its run (a real-time batch's whole time less its checkpoint interval is how long the
    query stopped reading at its end)."""
    return [{"batch": p["batchId"], "rows": p["numInputRows"], "trigger_ms": p["durationMs"].get("triggerExecution"),
             "planning_ms": p["durationMs"].get("queryPlanning"), "add_batch_ms": p["durationMs"].get("addBatch")}
            for p in progress]


def event(n: int, tag: str) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": f"{tag}-{n}", "source": "/bench", "type": f"bench.t{n % TYPES}",
                         "tenantid": "bt", "data": {"sent_ms": time.time() * 1000}})


def produce(bootstrap: str, topic: str, tag: str, rate: int | None, count: int, seconds: float = 0,
            at_half: Any = None) -> int:
    """``count`` events at once (``rate`` None) or ``rate`` per second for ``seconds``."""
    # A backlog is queued at once: room for more than librdkafka's default 100,000.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5 if rate else 50, "acks": "1",
                         "queue.buffering.max.messages": max(count, 100_000)})
    sent, half_at, halved = 0, time.monotonic() + seconds / 2, False
    for due in [count] if rate is None else paced(rate, seconds, tick_s=0.001):
        for _ in range(due):
            producer.produce(topic, event(sent, tag))
            sent += 1
            if sent % 10_000 == 0:
                producer.poll(0)
        if at_half is not None and not halved and time.monotonic() >= half_at:
            halved = True
            at_half()
        producer.poll(0)
    producer.flush(60)
    return sent


def work_row(message: Message) -> tuple[float, float, bytes, str]:
    """(sent, appended, key, event id) of an output record, in seconds."""
    body = orjson.loads(message.value())
    return body["data"]["sent_ms"] / 1000, message.timestamp()[1] / 1000, message.key() or b"", body["id"]


def measure(system: str, scenario: str, spark: Any, base: Settings, database: Database, owner: str, state: Path,
            rate: int, seconds: float, backlog: int, checkpoint_s: float, audit: bool) -> dict[str, Any]:
    tag = f"{system.replace('_', '')}{scenario}{rate}{uuid.uuid4().hex[:4]}"
    settings = settings_for(base, system, tag, checkpoint_s, audit)
    bootstrap = settings.kafka_bootstrap()
    topic = create_topics(settings)
    result: dict[str, Any] = {"system": system, "scenario": scenario, "rate": rate,
                              "load_average": os.getloadavg(), "realtime_checkpoint_s": checkpoint_s,
                              "audit": audit}
    records: list[tuple[float, float, bytes, str]] = []
    stop = threading.Event()
    expected = backlog if scenario == "backlog" else int(rate * seconds * 3)
    reader = threading.Thread(target=read_topic, args=(bootstrap, settings.delivery.work_topic, work_row, records),
                              kwargs={"expected": expected, "stop": stop})
    if scenario == "backlog":
        produce(bootstrap, topic, tag, None, backlog)
    compiled_before = compilations(spark)
    with CpuTimeline(spark_jvms(processes())) as cpu:
        running = start(system, spark, settings, database, state / "checkpoints" / tag)
        started = time.time()
        try:
            reader.start()
            if scenario == "backlog":
                # Until every record was appended; what arrived by the deadline is the figure.
                holds_within(lambda: len(records) >= backlog or running.failure() is not None, 600)
            else:
                wait_planned(lambda: spark.streams.active, running.failure, 180)
                swapped: list[tuple[str, str, float]] = []
                endpoints = EndpointService.from_settings(settings)
                at_half = (lambda: swapped.append(add_subscription(database, endpoints, owner))) if scenario == "swap" \
                    else None
                begun = time.time()
                result["sent"] = produce(bootstrap, topic, tag, rate, 0, seconds, at_half)
                # Until every event's request arrived and, after a registry change, one routed by it.
                holds_within(lambda: running.failure() is not None or (
                    len(records) >= result["sent"]
                    and not (swapped and not any(key == swapped[0][0].encode() for _, _, key, _ in records[-2000:]))),
                    5 + 60 * (scenario == "swap"))
        finally:
            stop.set()
            reader.join()
            failure = running.failure()
            result.update(batches=batch_times(running.progress()), compilations=compilations(spark) - compiled_before)
            time.sleep(1.0)  # one more CPU sample after the last append
            running.stop()
    if failure is not None:
        result["error"] = str(failure)[:600]
    result["received"] = len(records)
    appended = [a for _, a, _, _ in records]
    if appended:
        result["jvm_cpu_s"] = jvm_cpu_s(cpu, started, max(appended))
    if scenario == "backlog":
        if appended:
            drain_s = jvm_cpu_s(cpu, min(appended), max(appended))
            result.update(start_to_last_per_s=round(len(records) / (max(appended) - started)),
                          first_to_last_per_s=round(len(records) / max(max(appended) - min(appended), 1e-3)),
                          jvm_cpu_drain_s=drain_s, jvm_cpu_us_per_event=round(drain_s / len(records) * 1e6, 1))
        return result
    if appended:
        result["jvm_cpu_us_per_event"] = round(result["jvm_cpu_s"] / len(records) * 1e6, 1)
    counted = sorted(a - s for s, a, _, _ in records if s >= begun + WARMUP_S)
    if counted:
        result.update(p50_s=round(quantile(counted, 0.5), 3), p99_s=round(quantile(counted, 0.99), 3),
                      max_s=round(counted[-1], 3), counted=len(counted))
    if scenario == "swap" and swapped:
        added, subscription_id, at = swapped[0]
        remove_subscription(database, subscription_id)
        first = min((a for _, a, key, _ in records if key == added.encode()), default=None)
        result["change_to_first_routed_s"] = None if first is None else round(first - at, 3)
        twice = Counter((key, event_id) for _, _, key, event_id in records)
        result["routed_twice"] = sum(1 for n in twice.values() if n > 1)
    return result


def main() -> None:
    parser = cli.parser(__doc__, runs=1, out=("--out", "--results"))
    parser.add_argument("--rates", type=int, nargs="+", default=[300, 1000, 5000])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--backlog-events", type=int, default=100_000)
    parser.add_argument("--checkpoint-s", type=float, default=DeliverySettings().realtime_checkpoint_s,
                        help="delivery.realtime_checkpoint_s (default: the setting's default)")
    parser.add_argument("--audit", action="store_true",
                        help="route with the self-audit on, as `wayline run delivery` does (off: requests only)")
    parser.add_argument("--scenarios", type=cli.names(*SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--systems", type=cli.names(*SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--state", type=Path, default=Path("/tmp/wayline-bench-matching"))
    args = parser.parse_args()
    scenarios, systems = args.scenarios, args.systems
    results: list[dict[str, Any]] = []
    with fresh_stack(args.state, spark={"master": "local[4]"},
                     registry={"url_allow_list": LOOPBACK}) as (settings, database):
        owner = seed(database, EndpointService.from_settings(settings))
        spark = spark_session(settings)
        for _ in range(args.runs):
            plan = [("steady", rate) for rate in args.rates] * ("steady" in scenarios)
            plan += [("backlog", 0)] * ("backlog" in scenarios) + [("swap", 300)] * ("swap" in scenarios)
            for scenario, rate in plan:
                for system in systems:
                    if scenario == "swap" and system == "floor":
                        continue
                    result = measure(system, scenario, spark, settings, database, owner, args.state, rate,
                                     args.seconds, args.backlog_events, args.checkpoint_s, args.audit)
                    print(json.dumps(result), flush=True)
                    results.append(result)
                    # After each measurement: a run that fails later keeps what it measured.
                    record_results("matching", {"results": results}, args.out)
        spark.stop()


if __name__ == "__main__":
    main()
