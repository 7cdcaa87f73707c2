"""Benchmark: how many requests does a kill -9 of the delivery job send twice?

At-least-once means a crash may resend what was in flight; this counts what it costs.
`wayline run delivery` runs as its own process group while a stream of events is
produced; it is killed with SIGKILL ``--kills`` times and started again on the same
checkpoints. Each kill comes ``--min-up``..``--max-up`` seconds after the first delivery
since the last start, then at the next request, 0.5–3 s into that stage's sending (a
random moment within a stage: a kill between stages resends nothing on any version). One endpoint receives every event in streaming mode
(one request each), another in batch mode (``--batch`` events per request). The receiver
answers 204 after ``--receiver-ms`` and each endpoint takes ``--in-flight`` requests at
once, so the job is always sending — a stage runs until its deadline, as it does for a
receiver that is slower than the stream — and a kill lands in the middle of a stage, where
the duplicates come from. Per kill it counts the requests that arrive with a webhook-id
seen before (duplicates) and the event copies they carry beyond the first; the run ends
``--tail`` seconds after the last restart's first delivery (the replayed micro-batch's
resends come first).

``--src DIR`` runs the job from another source tree (prepended to PYTHONPATH, which Spark's
Python workers inherit): the baseline is the previous commit's ``src`` exported there
(``git archive <commit> src | tar -x -C bench/results/before``), measured first in the same
session, on the same stack and with the same kill times (``--seed``) as the current tree.

Run: .venv/bin/python bench/crash_duplicates.py [--kills 3] [--src bench/results/before/src]
It starts its own stack under bench/results/crash_duplicates-state and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from confluent_kafka import Producer

from toolkit import cli
from toolkit.receiver import serve
from toolkit.results import RESULTS, record_results
from toolkit.stack import LOOPBACK, fresh_stack, stop, wayline
from toolkit.waiting import wait_until
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.stack.loadgen import paced

REPO = Path(__file__).resolve().parent.parent
PREFIX = "events.crashbench."
STARTUP_S = 600.0


class Receiver:
    """Counts every request per webhook-id, and the events each one carried."""

    def __init__(self, delay_s: float) -> None:
        self._delay_s = delay_s
        self._lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.duplicates = 0
        self.extra_copies = 0
        self.requests = 0
        self.last_at = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        events = len(body) if isinstance(body, list) else 1
        with self._lock:
            webhook_id = request.headers["webhook-id"]
            self.requests += 1
            if self.seen[webhook_id]:
                self.duplicates += 1
                self.extra_copies += events
            self.seen[webhook_id] += 1
            self.last_at = time.monotonic()
        await asyncio.sleep(self._delay_s)
        return web.Response(status=204)

    def counts(self) -> tuple[int, int, int]:
        with self._lock:
            return self.requests, self.duplicates, self.extra_copies

    def serve(self) -> str:
        """Serve on a free port of 127.0.0.1 from a daemon thread; the base URL."""
        ready: list[str] = []
        started = threading.Event()

        async def run() -> None:
            app = web.Application()
            app.router.add_post("/{path}", self.handle)
            ready.append(f"http://127.0.0.1:{await serve(app)}")
            started.set()
            await asyncio.Event().wait()

        threading.Thread(target=lambda: asyncio.run(run()), name="receiver", daemon=True).start()
        started.wait(30)
        return ready[0]


def register(settings: Settings, database: Database, base: str, args: argparse.Namespace, event_type: str) -> None:
    endpoints = EndpointService.from_settings(settings)
    with database.transaction() as session:
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=event_type))
        catalog.upsert_tenants(session, ADMIN, [catalog.TenantIn(id="bench-t")])
        owner = customer.create(session, ADMIN, customer.CustomerIn(name=f"Crash bench {event_type}"))
        for path, mode in (("single", "streaming"), ("batched", "batch")):
            endpoint = endpoints.create(session, ADMIN, EndpointIn(
                url=f"{base}/{path}", customer_id=owner.id, secret=Secret.generate().text,
                max_in_flight=args.in_flight))
            extra = {"max_count": args.batch, "max_wait_ms": 500} if mode == "batch" else {}
            subscription.create(session, ADMIN, subscription.SubscriptionIn(
                endpoint_id=endpoint.id, event_types=[event_type], mode=mode, **extra))


def produce(bootstrap: str, topics: list[str], event_type: str, rate: float, stop: threading.Event,
            produced: list[int]) -> None:
    """``rate`` events/s until ``stop`` is set; how many, in ``produced``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    for due in paced(rate, tick_s=min(1 / rate, 0.01), stop=stop):
        for n in range(sent, sent + due):
            producer.produce(topics[n % len(topics)], orjson.dumps({
                "specversion": "1.0", "id": f"crash-{n}", "source": "/bench", "type": event_type,
                "tenantid": "bench-t", "data": {"n": n}}))
        sent += due
        producer.poll(0)
    producer.flush(30)
    produced.append(sent)


def start_job(settings: Settings, label: str, src: Path | None) -> subprocess.Popen[bytes]:
    environment = {
        "WAYLINE_STATE_DIR": str(settings.state_dir),
        # The jars of this checkout, also for a job run from another source tree (--src).
        "WAYLINE_SPARK__JARS_DIR": str(REPO / "jars" / "spark"),
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": PREFIX,
        "WAYLINE_DELIVERY__METRICS_PORT": "0",
        "WAYLINE_DELIVERY__BATCH_TOPIC": f"wayline.crashbench.{label}.batching",
        "WAYLINE_DELIVERY__STAGE_DEADLINE_S": "5",
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": json.dumps(LOOPBACK),
        "COLUMNS": "120",
    }
    if src is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src.resolve()), os.environ.get("PYTHONPATH")]))
    return wayline("run", "delivery", env=environment, log=settings.state_dir / f"{label}.log", group=True)


def kill_hard(job: subprocess.Popen[bytes]) -> None:
    stop(job, how=signal.SIGKILL, group=True)


def wait_for_delivery(receiver: Receiver, since: int, job: subprocess.Popen[bytes]) -> None:
    def delivered() -> bool:
        if job.poll() is not None:
            raise RuntimeError(f"the delivery job exited with {job.returncode}; see its log")
        return receiver.counts()[0] > since

    wait_until(delivered, "the delivery job's first delivery after it started", STARTUP_S, every_s=0.2)


def wait_quiet(receiver: Receiver, for_s: float) -> None:
    wait_until(lambda: time.monotonic() - receiver.last_at >= for_s, "the receiver to go quiet", math.inf,
               every_s=0.2)


def run(settings: Settings, database: Database, args: argparse.Namespace, label: str, src: Path | None,
        ) -> dict[str, Any]:
    """One session: its own event type, topics, receiver, registry rows and checkpoints."""
    rng = random.Random(args.seed)
    receiver = Receiver(args.receiver_ms / 1000)
    base = receiver.serve()
    event_type = f"crashbench.{label}"
    register(settings, database, base, args, event_type)
    topics = [f"{PREFIX}{label}.a", f"{PREFIX}{label}.b"]
    ensure_topics(settings.kafka_bootstrap(), topics, 2)
    shutil.rmtree(settings.checkpoint_root, ignore_errors=True)
    stop = threading.Event()
    produced: list[int] = []
    producer = threading.Thread(target=produce, args=(settings.kafka_bootstrap(), topics, event_type, args.rate, stop,
                                                      produced), name="producer")
    per_kill: list[dict[str, int]] = []
    job = start_job(settings, label, src)
    producer.start()
    try:
        for _ in range(args.kills):
            wait_for_delivery(receiver, receiver.counts()[0], job)
            time.sleep(rng.uniform(args.min_up, args.max_up))
            # Kill while a stage is sending (a request just came), a little way into it:
            # that is where resends come from. On a loaded machine most of a micro-batch is
            # Spark's own work, and a kill there resends nothing, on any version.
            wait_for_delivery(receiver, receiver.counts()[0], job)
            time.sleep(rng.uniform(0.5, 3.0))
            requests, duplicates, copies = receiver.counts()
            kill_hard(job)
            # What the dead job had sent may still be queued at the receiver.
            wait_quiet(receiver, 2.0)
            job = start_job(settings, label, src)
            # The restart's resends arrive first; count until its next kill (or the end).
            if per_kill:
                per_kill[-1] |= {"duplicates_to": duplicates, "copies_to": copies}
            per_kill.append({"requests_at_kill": requests, "duplicates_from": duplicates, "copies_from": copies})
        wait_for_delivery(receiver, receiver.counts()[0], job)
        time.sleep(args.tail)
    finally:
        stop.set()
        kill_hard(job)
        producer.join()
    requests, duplicates, copies = receiver.counts()
    per_kill[-1] |= {"duplicates_to": duplicates, "copies_to": copies}
    kills = [{"duplicate_requests": k["duplicates_to"] - k["duplicates_from"],
              "extra_event_copies": k["copies_to"] - k["copies_from"]} for k in per_kill]
    result = {
        "label": label, "src": str(src) if src else "current", "produced": produced[0],
        "requests": requests,
        "distinct_webhook_ids": len(receiver.seen), "duplicate_requests": duplicates,
        "extra_event_copies": copies, "kills": kills,
        "median_duplicates_per_kill": statistics.median(k["duplicate_requests"] for k in kills),
        "median_extra_copies_per_kill": statistics.median(k["extra_event_copies"] for k in kills),
    }
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--rate", type=float, default=20, help="events/s produced")
    parser.add_argument("--tail", type=float, default=30.0, help="seconds the run goes on after the last restart")
    parser.add_argument("--min-up", type=float, default=5.0, help="seconds of delivery before a kill, at least")
    parser.add_argument("--max-up", type=float, default=15.0, help="… and at most")
    parser.add_argument("--receiver-ms", type=float, default=500.0, help="the receiver's answer time")
    parser.add_argument("--in-flight", type=int, default=4, help="each endpoint's max_in_flight")
    parser.add_argument("--batch", type=int, default=20, help="max_count of the batch-mode subscription")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--src", type=Path, help="baseline: run the job from this source tree as well")
    args = parser.parse_args()

    state = RESULTS / "crash_duplicates-state"
    results = []
    with fresh_stack(state, registry={"url_allow_list": LOOPBACK}) as (settings, database):
        if args.src is not None:
            results.append(run(settings, database, args, "before", args.src))
        results.append(run(settings, database, args, "after", None))
    summary = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}
    record_results("crash_duplicates", summary, args.out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
