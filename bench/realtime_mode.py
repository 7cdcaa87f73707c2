"""Spark Real-time Mode against micro-batches for the JVM-only matching part (issue 13, item 6).

One Spark SQL query, no Python per row: Kafka source -> parse the CloudEvent envelope
(``from_json``) -> join a small routing table (type -> route, broadcast, as the delivery
job's snapshot join is) -> ``to_json`` -> Kafka sink on an internal topic. The same query
runs with ``trigger(realTime=...)`` and with a micro-batch trigger (``processingTime``
0 s: the next micro-batch starts as soon as the previous one ends), one after the other
in one run, each at a steady produce rate for a fixed time.

Latency of a record: the sink record's broker append time (the output topic uses
``LogAppendTime``) minus the source record's produce timestamp, which the query copies
into the output. Both clocks are this machine's. The first seconds of each run are
warm-up and not counted.

    WAYLINE_SPARK__DRIVER_MEMORY=1g WAYLINE_STACK__BROKER_HEAP=512m \
        .venv/bin/python bench/realtime_mode.py --rates 300 1000 --seconds 30

With ``--swap`` the routing table is a PostgreSQL table read over JDBC instead, rewritten
half-way through each run: the result adds how long after the rewrite the first record
routed by the new table arrived (the registry snapshot swap). With ``--probe`` it only
tries what else the real-time trigger accepts (Python UDF, foreachBatch, append mode,
console sink, aggregation, dropDuplicates) and reports each error class.

A trigger that Spark refuses is reported with its error class and message, not hidden.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import text

from toolkit import cli
from toolkit.results import record_results
from toolkit.stack import fresh_stack
from toolkit.stats import quantile
from toolkit.topics import read_topic
from toolkit.waiting import wait_planned
from wayline.registry.db import make_engine
from wayline.stack.loadgen import paced
from wayline.stack.spark import spark_session

TYPES = 500
ROUTES = 5
PARTITIONS = 2
WARMUP_S = 5.0


def create_topics(bootstrap: str, run: str) -> tuple[str, str]:
    source, sink = f"rtm-in-{run}", f"rtm-out-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(source, PARTITIONS, 1),
        NewTopic(sink, PARTITIONS, 1, config={"message.timestamp.type": "LogAppendTime"}),
    ])
    for future in futures.values():
        future.result()
    return source, sink


def route_rows(prefix: str = "") -> list[tuple[str, str]]:
    return [(f"type.{t}", f"{prefix}ep_{t % ROUTES}") for t in range(TYPES)]


def start_query(spark: Any, bootstrap: str, source: str, sink: str, trigger: dict[str, str],
                checkpoint: Path, routes: Any) -> Any:
    from pyspark.sql import functions as F

    envelope = "id string, type string, tenantid string, time string"
    events = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "latest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), envelope).alias("e"), F.col("timestamp").alias("produced"))
        .select("e.*", "produced")
    )
    routed = events.join(F.broadcast(routes), "type").select(
        F.col("route").alias("key"),
        F.to_json(F.struct("id", "type", "tenantid", "route",
                           F.unix_millis("produced").alias("produced_ms"))).alias("value"),
    )
    return (
        routed.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
        .trigger(**trigger)
        .start()
    )


def produce_steady(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1"})
    sent = 0
    for due in paced(rate, seconds, tick_s=0.001):
        for _ in range(due):
            body = {"specversion": "1.0", "id": f"e{sent}", "source": "/bench", "type": f"type.{sent % TYPES}",
                    "tenantid": "t1", "time": "2026-11-24T00:00:00Z", "data": {"n": sent}}
            producer.produce(topic, json.dumps(body).encode())
            sent += 1
        producer.poll(0)
    producer.flush(10)
    return sent


def latency_row(message: Message) -> tuple[float, float, float, str]:
    """(produced, latency, appended, route) of a sink record, times in seconds."""
    record = json.loads(message.value())
    produced, appended = record["produced_ms"], message.timestamp()[1]
    return produced / 1000, (appended - produced) / 1000, appended / 1000, record["route"]


def wait_until_running(query: Any, timeout_s: float = 120) -> None:
    """Running means it has planned its first batch (and, in real-time mode, launched its tasks)."""
    wait_planned(lambda: [query], query.exception, timeout_s)


class Swap:
    """The routing table in PostgreSQL, read over JDBC as the static side, rewritten mid-run:
    how long until the query routes by the new table?"""

    def __init__(self, spark: Any, settings: Any, run: str) -> None:
        self.table = f"rtm_routes_{run.replace('-', '_')}"
        self.engine = make_engine(settings)
        with self.engine.begin() as connection:
            connection.execute(text(f"CREATE TABLE {self.table} (type text PRIMARY KEY, route text)"))
            connection.execute(text(f"INSERT INTO {self.table} VALUES (:type, :route)"),
                               [{"type": t, "route": r} for t, r in route_rows()])
        dsn = urlsplit(settings.postgres_dsn())
        url = f"jdbc:postgresql://{dsn.hostname}:{dsn.port}{dsn.path}"
        self.routes = spark.read.jdbc(url, self.table, properties={
            "driver": "org.postgresql.Driver", "user": dsn.username or "", "password": dsn.password or ""})

    def swap(self) -> float:
        with self.engine.begin() as connection:
            connection.execute(text(f"UPDATE {self.table} SET route = 'v2_' || route"))
        return time.time()

    def close(self) -> None:
        self.engine.dispose()


def one_run(spark: Any, bootstrap: str, state: Path, run: str, name: str, trigger: dict[str, str], rate: int,
            seconds: float, swap: Swap | None = None) -> dict[str, Any]:
    source, sink = create_topics(bootstrap, run)
    result: dict[str, Any] = {"trigger": name, "rate": rate, "trigger_args": trigger, "swap": swap is not None}
    routes = swap.routes if swap else spark.createDataFrame(route_rows(), "type string, route string")
    try:
        query = start_query(spark, bootstrap, source, sink, trigger, state / "checkpoints" / run, routes)
        wait_until_running(query)
    except Exception as exc:  # the experiment's finding is the error itself
        result["error_class"] = getattr(exc, "getErrorClass", lambda: None)() or type(exc).__name__
        result["error"] = str(exc).splitlines()[0][:600]
        return result
    latencies: list[tuple[float, float, float, str]] = []
    stop = threading.Event()
    expected = int(rate * seconds)
    reader = threading.Thread(target=read_topic, args=(bootstrap, sink, latency_row, latencies),
                              kwargs={"expected": expected, "stop": stop})
    reader.start()
    started = time.time()
    swapped: list[float] = []
    if swap is not None:
        # Half-way through the measured part of the run.
        timer = threading.Timer(WARMUP_S + (seconds - WARMUP_S) / 2, lambda: swapped.append(swap.swap()))
        timer.start()
    sent = produce_steady(bootstrap, source, rate, seconds)
    reader.join(timeout=30)
    stop.set()
    reader.join()
    failure = query.exception()
    query.stop()
    counted = sorted(lat for produced, lat, _, _ in latencies if produced >= started + WARMUP_S)
    if swapped:
        first_new = min((appended for _, _, appended, route in latencies if route.startswith("v2_")), default=None)
        result["swap_to_first_new_route_s"] = None if first_new is None else round(first_new - swapped[0], 3)
    result.update(sent=sent, received=len(latencies), counted=len(counted))
    if failure is not None:
        result["error_class"] = failure.getErrorClass() or type(failure).__name__
        result["error"] = str(failure).splitlines()[0][:600]
    if counted:
        result.update(p50_s=round(quantile(counted, 0.5), 3), p99_s=round(quantile(counted, 0.99), 3),
                      max_s=round(counted[-1], 3))
    return result


def probe_variants(spark: Any, bootstrap: str, state: Path) -> list[dict[str, Any]]:
    """What real-time mode accepts beyond the matching query: each variant is started and
    either runs for a few seconds with events flowing or fails; the error class is the finding."""
    from pyspark.sql import functions as F

    run = f"probe-{uuid.uuid4().hex[:6]}"
    source, sink = create_topics(bootstrap, run)
    events = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source).load()
        .select(F.get_json_object(F.col("value").cast("string"), "$.type").alias("type"), "value")
    )
    to_kafka = {"kafka.bootstrap.servers": bootstrap, "topic": sink}
    python_udf = F.udf(lambda v: v.upper(), "string")
    variants: dict[str, Any] = {
        "Python UDF in the query": lambda: events.select(python_udf("type").alias("value"))
        .writeStream.format("kafka").options(**to_kafka).outputMode("update"),
        "foreachBatch sink": lambda: events.writeStream.foreachBatch(lambda df, _: df.count()).outputMode("update"),
        "append output mode": lambda: events.select("value").writeStream.format("kafka").options(**to_kafka)
        .outputMode("append"),
        "console sink": lambda: events.writeStream.format("console").outputMode("update"),
        "aggregation (count by type)": lambda: events.groupBy("type").count()
        .select(F.col("type").alias("key"), F.col("count").cast("string").alias("value"))
        .writeStream.format("kafka").options(**to_kafka).outputMode("update"),
        "dropDuplicates": lambda: events.dropDuplicates(["type"]).select("value")
        .writeStream.format("kafka").options(**to_kafka).outputMode("update"),
    }
    results = []
    for name, writer in variants.items():
        result: dict[str, Any] = {"variant": name}
        checkpoint = state / "checkpoints" / f"{run}-{len(results)}"
        try:
            query = writer().option("checkpointLocation", str(checkpoint)).trigger(realTime="10 seconds").start()
            wait_until_running(query, timeout_s=60)
            produce_steady(bootstrap, source, 100, 5)
            failure = query.exception()
            query.stop()
            if failure is not None:
                raise failure
            result["outcome"] = "ran"
        except Exception as exc:  # the finding is the error
            result["outcome"] = "failed"
            result["error_class"] = getattr(exc, "getErrorClass", lambda: None)() or type(exc).__name__
            result["error"] = str(exc).splitlines()[0][:600]
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


def main() -> None:
    parser = cli.parser(__doc__, runs=1, out=("--out", "--results"))
    parser.add_argument("--rates", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--probe", action="store_true",
                        help="instead: try what else real-time mode accepts (Python UDF, foreachBatch, ...)")
    parser.add_argument("--swap", action="store_true",
                        help="instead: read the routing table from PostgreSQL and rewrite it mid-run")
    parser.add_argument("--state", type=Path, default=Path("/tmp/wayline-bench-rtm"))
    args = parser.parse_args()
    triggers = {
        # The duration is real-time mode's checkpoint interval, not a latency target: each
        # interval ends its long-running tasks and starts new ones. 10 s falls inside a run,
        # 5 min (Spark's default) does not.
        "real-time 10 s": {"realTime": "10 seconds"},
        "real-time 5 min": {"realTime": "5 minutes"},
        "micro-batch": {"processingTime": "0 seconds"},
    }
    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()  # the file's load average is the one after
    with fresh_stack(args.state) as (settings, _database):
        spark = spark_session(settings)
        spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
        bootstrap = settings.kafka_bootstrap()
        if args.probe:
            results.extend(probe_variants(spark, bootstrap, args.state))
        for _ in range(0 if args.probe else args.runs):
            for rate in args.rates:
                for name, trigger in triggers.items():
                    run = f"{name}-{rate}-{uuid.uuid4().hex[:6]}".replace(" ", "-")
                    swap = Swap(spark, settings, run) if args.swap else None
                    try:
                        result = one_run(spark, bootstrap, args.state, run, name, trigger, rate, args.seconds, swap)
                    finally:
                        if swap is not None:
                            swap.close()
                    print(json.dumps(result), flush=True)
                    results.append(result)
        spark.stop()
    record_results("realtime_mode", {"load_average_before": load_before, "results": results}, args.out)


if __name__ == "__main__":
    main()
