"""Benchmark: the messaging API's publish rate through batch requests, its poll rate and its
transactional publish rate, against the raw confluent-kafka producer on the same broker.

The API runs as `--instances` processes side by side (`wayline serve messaging`, one
uvicorn worker each; the client spreads requests over them) on a fresh local stack. A
client process keeps `--concurrency` requests in flight, each a batch of `--batch`
CloudEvents of about 300 bytes (bodies serialized beforehand, so the client's own JSON
work is not measured), and records each request's latency. Then:
- poll: the whole topic paged through with `limit=1000`, records/s;
- transactions: `--txn-concurrency` clients each begin, publish 10 batches, commit, events/s;
- ceiling: the same events from one confluent-kafka Producer with the API's settings
  (acks=all, idempotence, linger 5 ms), produced then flushed, events/s.
Run: .venv/bin/python bench/messaging.py [--events 40000] [--batch 100] [--runs 3] [--instances 1]
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from confluent_kafka import Producer

from toolkit import cli
from toolkit.produce import send
from toolkit.results import RESULTS, record_medians
from toolkit.stack import fresh_stack, stop, wayline
from toolkit.stats import quantile
from toolkit.waiting import wait_until
from wayline.core.kafka import ensure_topics
from wayline.messaging.producer import producer_config
from wayline.registry import api_key
from wayline.registry.access import ADMIN
from wayline.stack.process import free_port

TXN_BATCHES = 10


def event(n: int) -> dict[str, Any]:
    return {"specversion": "1.0", "id": f"bench-{n}", "source": "/bench/messaging", "type": "order.created",
            "tenantid": f"t-{n % 1000}", "time": "2026-11-24T10:00:00Z",
            "data": {"order": n, "amount": n % 997, "currency": "EUR", "lines": [{"sku": f"sku-{n % 50}", "qty": 1}]}}


def bodies(count: int, batch: int, offset: int = 0) -> list[bytes]:
    return [orjson.dumps([event(offset + n) for n in range(start, min(start + batch, count))])
            for start in range(0, count, batch)]


async def publish_rate(
    bases: list[str], key: str, topic: str, batches: list[bytes], concurrency: int,
) -> dict[str, float]:
    latencies: list[float] = []
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in batches:
        queue.put_nowait(body)
    events = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                                 timeout=60, limits=limits) as client:
        async def worker(base: str) -> None:
            nonlocal events
            while not queue.empty():
                body = queue.get_nowait()
                started = time.perf_counter()
                response = await client.post(f"{base}/topics/{topic}/events", content=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise RuntimeError(f"publish answered {response.status_code}: {response.text[:300]}")
                events += len(response.json()["results"])

        started = time.perf_counter()
        await asyncio.gather(*(worker(bases[n % len(bases)]) for n in range(concurrency)))
        seconds = time.perf_counter() - started
    latencies.sort()
    return {"publish_events_per_s": events / seconds, "publish_p50_ms": 1000 * quantile(latencies, 0.5),
            "publish_p99_ms": 1000 * quantile(latencies, 0.99)}


def poll_rate(base: str, key: str, topic: str, expected: int) -> float:
    seen, cursor = 0, None
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        started = time.perf_counter()
        while seen < expected:
            params: dict[str, Any] = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
            page = client.get(f"/topics/{topic}/events", params=params).json()
            seen += len(page["records"])
            cursor = page["next_cursor"]
        return seen / (time.perf_counter() - started)


async def transactional_rate(bases: list[str], key: str, topic: str, batches: list[bytes], concurrency: int) -> float:
    groups = [batches[i:i + TXN_BATCHES] for i in range(0, len(batches), TXN_BATCHES)]
    queue: asyncio.Queue[list[bytes]] = asyncio.Queue()
    for group in groups:
        queue.put_nowait(group)
    events = 0
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                                 timeout=120) as client:
        async def worker(base: str) -> None:
            # A transaction lives on the instance that began it: this worker stays with one.
            nonlocal events
            while not queue.empty():
                group = queue.get_nowait()
                txn = (await client.post(f"{base}/transactions")).json()["id"]
                for body in group:
                    response = await client.post(f"{base}/transactions/{txn}/topics/{topic}/events", content=body)
                    if response.status_code != 200:
                        raise RuntimeError(f"transactional publish answered {response.status_code}: {response.text}")
                    events += len(response.json()["results"])
                committed = await client.post(f"{base}/transactions/{txn}/commit")
                if committed.status_code != 200:
                    raise RuntimeError(f"commit answered {committed.status_code}: {committed.text}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(bases[n % len(bases)]) for n in range(concurrency)))
        return events / (time.perf_counter() - started)


def raw_producer_rate(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer(producer_config(bootstrap, 5.0, 30_000))
    values = [(orjson.dumps(event(n)), f"t-{n % 1000}".encode()) for n in range(count)]
    started = time.perf_counter()
    for value, key in values:
        send(producer, topic, value, key, backoff_s=0.01)
        producer.poll(0)
    producer.flush(60)
    return count / (time.perf_counter() - started)


def serve(state: Path, port: int, instance: str) -> subprocess.Popen[bytes]:
    process = wayline("serve", "messaging", "--port", str(port),
                      env={"WAYLINE_STATE_DIR": str(state), "WAYLINE_MESSAGING__INSTANCE_ID": instance})

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, "the messaging API to come up", 60, every_s=0.2)
    except TimeoutError:
        process.terminate()
        raise
    return process


def main() -> None:
    parser = cli.parser(__doc__, runs=3)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--txn-concurrency", type=int, default=4)
    parser.add_argument("--instances", type=int, default=1, help="API processes side by side (stateless)")
    args = parser.parse_args()
    state = RESULTS / "messaging-state"
    runs = []
    with fresh_stack(state) as (settings, database):
        with database.transaction() as session:
            key = api_key.create(session, ADMIN, api_key.ApiKeyIn(name="bench", scope="admin")).key
        bootstrap = settings.kafka_bootstrap()
        ports = [free_port() for _ in range(args.instances)]
        servers = [serve(state, port, f"bench-{n}") for n, port in enumerate(ports)]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for run in range(args.runs):
                topics = {kind: f"bench.{kind}.{run}" for kind in ("api", "txn", "raw")}
                ensure_topics(bootstrap, topics.values(), settings.kafka.topic_partitions)
                result: dict[str, float] = {}
                result |= asyncio.run(publish_rate(bases, key, topics["api"], bodies(args.events, args.batch),
                                                   args.concurrency))
                result["poll_records_per_s"] = poll_rate(bases[0], key, topics["api"], args.events)
                txn_events = args.events // 2
                result["transactional_events_per_s"] = asyncio.run(transactional_rate(
                    bases, key, topics["txn"], bodies(txn_events, args.batch), args.txn_concurrency))
                result["raw_producer_events_per_s"] = raw_producer_rate(bootstrap, topics["raw"], args.events)
                result["publish_share_of_raw"] = result["publish_events_per_s"] / result["raw_producer_events_per_s"]
                runs.append(result)
                print(json.dumps(result), flush=True)
        finally:
            for server in servers:
                stop(server, how=signal.SIGTERM, timeout_s=30)
    print(json.dumps(record_medians("messaging", args, runs), indent=2))


if __name__ == "__main__":
    main()
