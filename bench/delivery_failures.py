"""Benchmark: does a failing or hanging endpoint slow anyone else down?

Per delivery engine (``--engines``: ``micro_batch``, the delivery job in this process's
Spark session; ``senders``, ``wayline run delivery`` with ``delivery.engine = "senders"``
as its own process, as an operator starts it), two registries of ``--endpoints`` endpoints each, one event type each, every endpoint
subscribed (streaming mode) to its own tenant, so each event goes to exactly one
endpoint. In the *healthy* scenario every endpoint answers 204; in the *faulty* one 5%
answer 500 and 5% hang (never answer). Both scenarios run in the same session, on the
same stack, with the delivery job *and* the retry query running, as in production: the
retry query is its own process (`wayline run retries`, its own Spark driver), working off
the failures meanwhile on the same two cores. (In one Spark session the retry query's
tasks, waiting on hanging endpoints, would hold the task slots the delivery job needs.)
Per scenario, fresh topics:

- **warm-up** (``--warmup`` events per endpoint, 0 for none; not timed): every endpoint
  is reached, then ``--settle`` seconds pass, so the run measures endpoints that have been
  failing for a while — as in production — not Wayline's first contact with each;
- **backlog**: ``--backlog`` events produced first, then drained; the healthy endpoints'
  delivery rate is their events divided by the time from their first to last arrival;
- **steady**: ``--rate`` events/s for ``--seconds`` s, each stamped with its send time;
  the healthy endpoints' end-to-end latency (p50, p99) from that stamp to arrival.

The receiver is its own process (aiohttp, one path per endpoint); it does not verify
signatures here (bench/delivery.py does), to keep its CPU share small.
Run: .venv/bin/python bench/delivery_failures.py [--endpoints 2000] [--backlog 20000] [--engines senders,micro_batch]
It starts its own stack under bench/results/delivery_failures-state and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from confluent_kafka import Producer

from toolkit import cli
from toolkit.produce import paced
from toolkit.receiver import serve, serving
from toolkit.results import RESULTS, record_results
from toolkit.stack import LOOPBACK, fresh_stack, stop, wayline
from toolkit.stats import quantile
from toolkit.systems import senders_process
from toolkit.waiting import while_arriving
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.pipelines.delivery import start_delivery
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.stack.spark import spark_session

PER_CUSTOMER = 100
# Give up when nothing new arrived for this long (the first arrival may take longer: the
# job's first micro-batch loads the snapshot and starts Python workers).
STALL_S = 60.0
FIRST_ARRIVAL_S = 600.0
ENGINES = ("micro_batch", "senders")


def receive(port_out: Any) -> None:
    """The receiver process: /ok/* answers 204 and records latency, /fail/* 500, /hang/* never."""
    # Per phase, each event's first arrival; repeats (at-least-once: a request cut by the
    # stage deadline after it arrived is sent again) are counted, not timed.
    arrivals: dict[str, dict[str, tuple[float, float]]] = {}
    repeats: dict[str, int] = {}

    async def ok(request: web.Request) -> web.Response:
        now = time.time()
        body = orjson.loads(await request.read())
        # Event ids are "<phase>-<n>": the backlog and the steady phase are counted apart.
        phase = body["id"].rsplit("-", 1)[0]
        seen = arrivals.setdefault(phase, {})
        if body["id"] in seen:
            repeats[phase] = repeats.get(phase, 0) + 1
        else:
            seen[body["id"]] = (now, now - body["data"]["sent"])
        return web.Response(status=204)

    async def fail(_request: web.Request) -> web.Response:
        return web.Response(status=500, text="failing on purpose")

    async def hang(_request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response(status=204)

    async def stats(request: web.Request) -> web.Response:
        phase = request.match_info["phase"]
        got = arrivals.get(phase, {}).values()
        return web.json_response({"count": len(got), "repeats": repeats.get(phase, 0),
                                  "first": min((a for a, _ in got), default=None),
                                  "last": max((a for a, _ in got), default=None),
                                  "latencies": sorted(lat for _, lat in got)})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/ok/{scenario}/{n}", ok)
        app.router.add_post("/fail/{scenario}/{n}", fail)
        app.router.add_post("/hang/{scenario}/{n}", hang)
        app.router.add_get("/stats/{phase}", stats)
        port_out.send(await serve(app))
        await asyncio.Event().wait()

    asyncio.run(main())


def phase_stats(receiver: str, phase: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{receiver}/stats/{phase}", timeout=60) as answer:
        return json.loads(answer.read())


def kinds(endpoints: int, faulty: bool, rng: random.Random) -> list[str]:
    if not faulty:
        return ["ok"] * endpoints
    bad = endpoints // 20
    shape = ["fail"] * bad + ["hang"] * bad + ["ok"] * (endpoints - 2 * bad)
    rng.shuffle(shape)
    return shape


def register(database: Database, settings: Settings, receiver: str, scenario: str, shape: list[str]) -> str:
    """Endpoints and subscriptions of one scenario; returns its event type."""
    event_type = f"bench.{scenario}.event"
    service = EndpointService.from_settings(settings)
    with database.transaction() as session:
        catalog.upsert_tenants(session, ADMIN, [catalog.TenantIn(id=f"{scenario}-{n}") for n in range(len(shape))])
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=event_type))
        owner = ""
        for n, kind in enumerate(shape):
            if n % PER_CUSTOMER == 0:
                owner = customer.create(session, ADMIN, customer.CustomerIn(name=f"bench {scenario} {n}")).id
            created = service.create(session, ADMIN, EndpointIn(
                url=f"{receiver}/{kind}/{scenario}/{n}", customer_id=owner))
            subscription.create(session, ADMIN, subscription.SubscriptionIn(
                endpoint_id=created.id, event_types=[event_type], tenant_scope="tenants", tenants=[f"{scenario}-{n}"]))
    return event_type


def produce(bootstrap: str, topic: str, event_type: str, scenario: str, phase: str, targets: list[int],
            rate: float | None) -> None:
    """An event to each of ``targets`` in turn (an index of the endpoint, so of its tenant),
    ``rate`` per second or (None) all at once."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    for due in [len(targets)] if rate is None else paced(rate, tick_s=0.001):
        for i in range(sent, min(sent + due, len(targets))):
            producer.produce(topic, orjson.dumps({
                "specversion": "1.0", "id": f"{phase}-{i}", "source": "/bench", "type": event_type,
                "tenantid": f"{scenario}-{targets[i]}", "data": {"sent": time.time()},
            }))
            producer.poll(0)
        sent += due
        if sent >= len(targets):
            break
    producer.flush(60)


@dataclass
class Delivering:
    """A started engine: ``alive`` (raising if it failed), ``stop``, and its own figures."""

    alive: Callable[[], bool]
    stop: Callable[[], None]
    figures: Callable[[], dict[str, Any]] = dict


def start_engine(engine: str, spark: Any, settings: Settings, database: Database, scenario: str) -> Delivering:
    """The delivery job for ``settings`` under ``engine``; both read the scenario's fresh topics."""
    if engine == "senders":
        # The matching query's checkpoint is the engine's own, named by neither topic nor scenario.
        shutil.rmtree(settings.checkpoint_root / "delivery", ignore_errors=True)
        # This bench runs one retry process for every scenario (start_retry_process).
        commands = senders_process(
            settings, scenario, {"WAYLINE_DELIVERY__OPERATIONS_TOPIC": settings.delivery.operations_topic},
            retries=False, log=settings.state_dir / f"{scenario}-delivery.log")
        return Delivering(commands.alive, commands.stop)
    metrics = DeliveryMetrics()
    job = start_delivery(spark, settings, database, EndpointService.from_settings(settings), metrics,
                         checkpoint=settings.state_dir / "checkpoints" / scenario / "delivery")

    def alive() -> bool:
        if job.exception() is not None:
            raise RuntimeError(f"the delivery job failed: {job.exception()}")
        return job.isActive

    def figures() -> dict[str, Any]:
        totals = metrics.totals()
        return {"micro_batches": totals.batches,
                "phase_seconds": {phase: round(s, 1) for phase, s in totals.phase_seconds.most_common()}}

    return Delivering(alive, job.stop, figures)


def wait_for(receiver: str, phase: str, expected: int, delivering: Delivering) -> dict[str, Any]:
    """The phase's arrivals once ``expected`` came, or (fewer) once they stopped coming."""
    got = while_arriving(lambda: phase_stats(receiver, phase), lambda g: g["count"], expected, stall_s=STALL_S,
                         first_s=FIRST_ARRIVAL_S, every_s=1.0, alive=delivering.alive)
    if not delivering.alive():
        raise RuntimeError(f"the delivery job stopped during phase {phase}")
    if not got["count"]:
        raise RuntimeError(f"nothing of phase {phase} arrived in {FIRST_ARRIVAL_S:g} s")
    return got


def scenario_run(spark: Any, base: Settings, database: Database, receiver: str, engine: str, scenario: str,
                 faulty: bool, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    shape = kinds(args.endpoints, faulty, rng)
    prefix = f"events.{scenario}."
    settings = base.model_copy(update={
        "kafka": base.kafka.model_copy(update={"event_topic_prefix": prefix}),
        "delivery": base.delivery.model_copy(update={
            "batch_topic": f"bench.{scenario}.batching", "operations_topic": f"bench.{scenario}.operations",
            "stage_deadline_s": args.deadline, "max_offsets_per_trigger": args.per_trigger, "metrics_port": 0}),
    })
    topic = f"{prefix}events"
    ensure_topics(settings.kafka_bootstrap(), [topic], settings.kafka.topic_partitions)
    event_type = register(database, settings, receiver, scenario, shape)
    warmup = list(range(args.endpoints)) * args.warmup
    rng.shuffle(warmup)
    backlog = [rng.randrange(args.endpoints) for _ in range(args.backlog)]
    produce(settings.kafka_bootstrap(), topic, event_type, scenario, scenario + "w", warmup, None)
    job = start_engine(engine, spark, settings, database, scenario)
    result: dict[str, Any] = {"engine": engine, "scenario": scenario, "faulty": faulty, "cold": not args.warmup,
                              "endpoints": args.endpoints, "healthy_endpoints": shape.count("ok")}
    try:
        if warmup:
            wait_for(receiver, scenario + "w", sum(1 for n in warmup if shape[n] == "ok"), job)
            time.sleep(args.settle)
        produce(settings.kafka_bootstrap(), topic, event_type, scenario, scenario + "b", backlog, None)
        expected = sum(1 for n in backlog if shape[n] == "ok")
        got = wait_for(receiver, scenario + "b", expected, job)
        result |= {"backlog_healthy_expected": expected, "backlog_healthy_delivered": got["count"],
                   "backlog_healthy_repeats": got["repeats"],
                   "backlog_healthy_per_s": got["count"] / (got["last"] - got["first"])}
        steady = [rng.randrange(args.endpoints) for _ in range(int(args.rate * args.seconds))]
        produce(settings.kafka_bootstrap(), topic, event_type, scenario, scenario + "s", steady, args.rate)
        expected = sum(1 for n in steady if shape[n] == "ok")
        got = wait_for(receiver, scenario + "s", expected, job)
        latencies = got["latencies"]
        result |= {"steady_healthy_expected": expected, "steady_healthy_delivered": got["count"],
                   "steady_healthy_repeats": got["repeats"],
                   "steady_p50_s": quantile(latencies, 0.5), "steady_p99_s": quantile(latencies, 0.99)}
        job.alive()
    finally:
        job.stop()
    result |= job.figures() | {"load_average": os.getloadavg()}
    print(json.dumps(result), flush=True)
    return result


def start_retry_process(settings: Settings, deadline: float) -> subprocess.Popen[bytes]:
    """`wayline run retries` for every scenario, in its own process group (stopped by its pid)."""
    return wayline("run", "retries", env={
        "WAYLINE_STATE_DIR": str(settings.state_dir),
        "WAYLINE_DELIVERY__STAGE_DEADLINE_S": str(deadline),
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": json.dumps(LOOPBACK),
        "WAYLINE_DELIVERY__OPERATIONS_TOPIC": "bench.operations",
        "WAYLINE_DELIVERY__RETRY_METRICS_PORT": "0",
    }, log=settings.state_dir / "retries.log", group=True)


def main() -> None:
    parser = cli.parser(__doc__, runs=1)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--deadline", type=float, default=5.0, help="delivery.stage_deadline_s")
    # Small micro-batches: a streaming stage's requests must finish within the deadline on a
    # loaded 2-core machine, or the healthy run itself spills into the retry store.
    parser.add_argument("--per-trigger", type=int, default=1000, help="kafka.max_offsets_per_trigger")
    parser.add_argument("--warmup", type=int, default=1, help="untimed events per endpoint before the backlog")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the warm-up before timing")
    parser.add_argument("--engines", type=cli.names(*ENGINES), default=["micro_batch"],
                        help=f"delivery.engine, some of {','.join(ENGINES)}")
    args = parser.parse_args()

    state = RESULTS / "delivery_failures-state"
    with fresh_stack(state, registry={"url_allow_list": LOOPBACK}) as (settings, database):
        results = run_all(settings, database, args)
    written = record_results("delivery_failures", {"args": vars(args), "results": results}, args.out)
    print(written.read_text())


def run_all(settings: Settings, database: Database, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with serving(receive) as receiver:
        retries = start_retry_process(settings, args.deadline)
        # The senders engine runs its own Spark, in `wayline run delivery`.
        spark = spark_session(settings) if "micro_batch" in args.engines else None
        try:
            for n in range(args.runs):
                for engine in args.engines:
                    # Alternate the order, so neither scenario always runs on a warmer JVM.
                    for faulty in ((False, True) if n % 2 == 0 else (True, False)):
                        scenario = f"{engine[0]}{'faulty' if faulty else 'healthy'}{n}"
                        results.append(scenario_run(spark, settings, database, receiver, engine, scenario, faulty,
                                                    args))
        finally:
            if spark is not None:
                spark.stop()
            stop(retries, group=True)
    return results


if __name__ == "__main__":
    main()
