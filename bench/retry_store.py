"""Benchmark: can the PostgreSQL retry store keep up, and what would a Kafka retry topic give?

The retry path's store work per entry, without HTTP: ``--entries`` entries of a 512-byte
payload over 2,000 endpoints are handed over the way the delivery stage does
(``PostgresDeliveryStore.record``), then drained by ``--drainers`` threads, one shard
each, exactly as the retry query's tasks do (``RetryQueue.claim`` with ``FOR UPDATE SKIP
LOCKED`` and a lease, then ``RetryQueue.settle``: half succeed — delivery log row, entry
deleted — and half are rescheduled with an attempt-log row). Reported: entries/s for the
hand-over and for claim + settle.

For reference, the same number of records produced to and consumed from a Kafka topic
(the transport a retry-topic design would use), with no bookkeeping at all.
Run: .venv/bin/python bench/retry_store.py [--entries 50000] [--runs 3]
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, Producer

from toolkit import cli
from toolkit.results import RESULTS, record_medians
from toolkit.stack import fresh_stack
from wayline.core.kafka import ensure_topics
from wayline.delivery.attempt import Pending, Succeeded, WillRetry
from wayline.delivery.storage.drain import RetryQueue
from wayline.delivery.storage.store import PostgresDeliveryStore
from wayline.delivery.transports.base import Response

PAYLOAD = b"x" * 512


def hand_over(store: PostgresDeliveryStore, run: str, entries: int) -> float:
    now = datetime.now(UTC)
    failed = Response(500, {}, b"no", 0.01)
    states = [
        WillRetry(Pending.single(f"{run}-{n}", PAYLOAD, subscription_id=f"sub_{n % 2000}",
                                 endpoint_id=f"ep_{run}_{n % 2000}", now=now), failed)
        for n in range(entries)
    ]
    started = time.perf_counter()
    for chunk in range(0, entries, 1000):
        store.record(states[chunk:chunk + 1000])
    return entries / (time.perf_counter() - started)


def drain(queue: RetryQueue, drainers: int) -> tuple[float, int]:
    done = [0] * drainers
    ok = Response(204, {}, b"", 0.01)
    failed = Response(500, {}, b"no", 0.01)
    rng = random.Random(1)

    def work(shard: int) -> None:
        while True:
            now = datetime.now(UTC)
            claims = queue.claim(shard, drainers, 1000, timedelta(seconds=60), now)
            if not claims:
                return
            states = [
                Succeeded(c.pending, ok, now) if rng.random() < 0.5
                else WillRetry(replace(c.pending, attempts=c.pending.attempts + 1, due_at=now + timedelta(days=1)),
                               failed)
                for c in claims
            ]
            queue.settle(claims, states, now)
            done[shard] += len(claims)

    threads = [threading.Thread(target=work, args=(shard,)) for shard in range(drainers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started), sum(done)


def kafka_round_trip(bootstrap: str, topic: str, entries: int) -> float:
    ensure_topics(bootstrap, [topic], 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    started = time.perf_counter()
    for n in range(entries):
        producer.produce(topic, PAYLOAD, key=str(n % 2000).encode())
        producer.poll(0)
    producer.flush(60)
    seen = 0
    while seen < entries:
        seen += sum(1 for m in consumer.consume(10_000, timeout=1.0) if m.error() is None)
    consumer.commit(asynchronous=False)
    consumer.close()
    return entries / (time.perf_counter() - started)


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--drainers", type=int, default=2)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with fresh_stack(RESULTS / "retry_store-state") as (settings, database):
        store, queue = PostgresDeliveryStore(database.engine), RetryQueue(database.engine)
        for n in range(args.runs):
            run = f"r{n}"
            handed = hand_over(store, run, args.entries)
            drained, count = drain(queue, args.drainers)
            kafka = kafka_round_trip(settings.kafka_bootstrap(), f"bench.retry.{run}", args.entries)
            runs.append({"hand_over_per_s": handed, "claim_settle_per_s": drained, "drained": count,
                         "kafka_produce_consume_per_s": kafka})
            print(json.dumps(runs[-1]), flush=True)
    print(json.dumps(record_medians("retry_store", args, runs), indent=2))


if __name__ == "__main__":
    main()
