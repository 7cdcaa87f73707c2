"""A hard crash of the delivery job mid-stream, and its restart from the checkpoints.

`wayline run delivery` runs as its own process group (driver, Spark JVM, Python
workers; with ``delivery.engine = "senders"``, the sender processes) while events are
produced; it is killed with SIGKILL once deliveries are flowing, then started again on the
same checkpoints. Both engines go through the same scenario, on topics of their own. Afterwards every matched event must
have reached the receiver or be waiting in the retry store, and no request may have
reached the receiver after its webhook-id's success was logged: the delivery log is
written once, by the first stage that saw a 2xx, so any arrival later than that entry
would be a resend of an acknowledged delivery.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer
from sqlalchemy import select

from tests.conftest import REPO
from tests.delivery.receivers import Receivers
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.delivery.signing import message_id
from wayline.delivery.storage.store import DeliveryLogEntry, RetryEntry
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENGINES = ("micro_batch", "senders")
EVENTS = 3000
RATE = 100  # events/s
HELD_AT = 2 * EVENTS // 3
"""The producer waits here until the job has been killed."""
BATCH = 20


class Arrivals:
    """Wall-clock arrival times per webhook id, and the events each request carried."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)
        self.events: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()

    async def handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        with self._lock:
            self.at[request.headers["webhook-id"]].append(time.time())
            for event in body if isinstance(body, list) else [body]:
                self.events[request.path].add(event["id"])
        return web.Response(status=204)

    def quiet(self, for_s: float = 2.0) -> bool:
        with self._lock:
            latest = max((times[-1] for times in self.at.values()), default=0.0)
        return time.time() - latest > for_s

    def count(self, path: str) -> int:
        with self._lock:
            return len(self.events[path])


def prefix(engine: str) -> str:
    return f"events.crash{engine.replace('_', '')}."


def job_environment(settings: Settings, engine: str = "micro_batch") -> dict[str, str]:
    return os.environ | {
        "WAYLINE_STATE_DIR": str(settings.state_dir),
        "WAYLINE_SPARK__JARS_DIR": str(REPO / "jars" / "spark"),
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": prefix(engine),
        "WAYLINE_DELIVERY__METRICS_PORT": "0",
        "WAYLINE_DELIVERY__ENGINE": engine,
        "WAYLINE_DELIVERY__WORK_TOPIC": f"wayline.crash.{engine}.work",
        "WAYLINE_DELIVERY__BATCH_TOPIC": f"wayline.crash.{engine}.batching",
        "WAYLINE_DELIVERY__STAGE_DEADLINE_S": "5",
        # No retry path runs here: an endpoint cut as a straggler on a loaded machine would
        # send nothing more until the end, and the kill would never come mid-stream.
        "WAYLINE_DELIVERY__STRAGGLER_CUT_S": "5",
        # Micro-batches of a few seconds of the stream: however late the job starts on a
        # loaded machine, the kill comes while the stream is still being delivered.
        "WAYLINE_DELIVERY__MAX_OFFSETS_PER_TRIGGER": "200",
        # The receivers listen on 127.0.0.1, which the transport refuses unless allowed.
        "WAYLINE_REGISTRY__URL_ALLOW_LIST": '["127.0.0.1/32"]',
        "COLUMNS": "120",
    }


def start_job(settings: Settings, log: Path, engine: str = "micro_batch") -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "wayline.cli.main", "run", "delivery"], env=job_environment(settings, engine),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def kill_hard(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=30)


def group_alive(job: subprocess.Popen[bytes]) -> bool:
    """Whether any process of ``job``'s process group is left."""
    try:
        os.killpg(job.pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_driver(job: subprocess.Popen[bytes]) -> bool:
    """SIGKILL to the job's driver alone; whether the rest of its group (the Spark JVM and
    its workers, the sender processes) went by itself within a minute. What is left is
    killed."""
    job.kill()
    job.wait(timeout=30)
    try:
        wait_for(lambda: not group_alive(job), "the killed driver's processes to go", 60)
        return True
    except AssertionError:
        os.killpg(job.pid, signal.SIGKILL)
        return False


def subscribe_single_and_batched(database, endpoints: EndpointService, base: str, event_type: str, tenant: str,
                                 batch: int) -> dict[str, str]:
    """A customer of ``tenant`` with two endpoints on the receiver at ``base``: ``/single`` in
    streaming mode and ``/batched`` in batch mode (``batch`` events or 500 ms); their
    subscriptions' ids by path."""
    with database.transaction() as s:
        catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=event_type))
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=tenant)])
        owner = customer.create(s, ADMIN, customer.CustomerIn(name=f"{tenant} customer"))
        ids = {}
        for path, mode in (("single", "streaming"), ("batched", "batch")):
            endpoint = endpoints.create(s, ADMIN, EndpointIn(
                url=f"{base}/{path}", customer_id=owner.id, secret=Secret.generate().text, max_in_flight=32))
            extra = {"max_count": batch, "max_wait_ms": 500} if mode == "batch" else {}
            ids[path] = subscription.create(s, ADMIN, subscription.SubscriptionIn(
                endpoint_id=endpoint.id, event_types=[event_type], mode=mode, **extra)).id
    return ids


@pytest.fixture(scope="module", params=ENGINES)
def crashed_and_restarted(request: pytest.FixtureRequest, api_settings: Settings, database,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    engine: str = request.param
    # Each engine starts from no checkpoint: the other's batching query read other topics.
    shutil.rmtree(api_settings.checkpoint_root / "delivery", ignore_errors=True)
    topics = (f"{prefix(engine)}a", f"{prefix(engine)}b")
    event_type, tenant = f"crash.{engine}.happened", f"crash-{engine}"
    bootstrap = api_settings.kafka_bootstrap()
    ensure_topics(bootstrap, topics, 2)
    endpoints = EndpointService.from_settings(api_settings)
    arrivals = Arrivals()
    log = tmp_path_factory.mktemp("crash") / "job.log"
    with Receivers() as receivers:
        base = receivers.serve({"/single": arrivals.handle, "/batched": arrivals.handle})
        ids = subscribe_single_and_batched(database, endpoints, base, event_type, tenant, BATCH)
        event_ids = [f"crash-{engine}-{n}" for n in range(EVENTS)]
        killed = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap})
            for n, event_id in enumerate(event_ids):
                if n == HELD_AT:
                    # However long the job takes to deliver its first batches on a loaded
                    # machine, the rest of the stream comes after the kill: it is mid-stream.
                    killed.wait(300)
                producer.produce(topics[n % 2], orjson.dumps({
                    "specversion": "1.0", "id": event_id, "source": "/crash", "type": event_type,
                    "tenantid": tenant, "data": {"n": n}}))
                producer.poll(0)
                time.sleep(1 / RATE)
            assert producer.flush(30) == 0

        producer = threading.Thread(target=produce, name="crash-producer")
        job = start_job(api_settings, log, engine)
        try:
            # The stream starts once the job runs: a job that starts slowly on a loaded machine
            # still meets a stream in progress (a real-time matching query reads no less than
            # everything there is, so a backlog built meanwhile would all be delivered at once).
            wait_for(lambda: b"delivering;" in log.read_bytes(), "the job to run", 180)
            producer.start()
            wait_for(lambda: arrivals.count("/single") > 200 and arrivals.count("/batched") > 2 * BATCH,
                     "the first deliveries", 180)
            # The driver alone: what it started must go with it (the sender processes watch it).
            went_with_driver = kill_driver(job)
            # Requests the job sent before it died may still be queued at the receiver.
            wait_for(arrivals.quiet, "the receiver to take what the killed job sent", 60)
            killed_at = (arrivals.count("/single"), arrivals.count("/batched"))
            sent_before_kill = set(arrivals.at)
            killed.set()
            job = start_job(api_settings, log, engine)
            producer.join(timeout=60)

            def settled() -> bool:
                with database.transaction() as s:
                    waiting = {e for row in s.scalars(select(RetryEntry.event_ids)) for e in row}
                return all(len((arrivals.events[p] | waiting) & set(event_ids)) == EVENTS
                           for p in ("/single", "/batched"))

            wait_for(settled, "every event delivered or waiting for a retry", 240)
        finally:
            killed.set()  # a failure before the kill leaves no producer waiting
            kill_hard(job)
        with database.transaction() as s:
            logged = {row.webhook_id: row.delivered_at.timestamp() for row in s.scalars(select(DeliveryLogEntry))}
            waiting = list(s.scalars(select(RetryEntry).where(RetryEntry.subscription_id.in_(ids.values()))))
        yield {"arrivals": arrivals, "logged": logged, "waiting": waiting, "ids": ids, "event_ids": event_ids,
               "killed_at": killed_at, "sent_before_kill": sent_before_kill, "went_with_driver": went_with_driver}


def test_the_job_was_killed_mid_stream(crashed_and_restarted: dict) -> None:
    single, batched = crashed_and_restarted["killed_at"]
    assert 0 < single < EVENTS and 0 < batched < EVENTS


def test_nothing_outlives_the_killed_driver(crashed_and_restarted: dict) -> None:
    assert crashed_and_restarted["went_with_driver"]


def test_every_matched_event_is_delivered_or_waits_for_a_retry(crashed_and_restarted: dict) -> None:
    arrivals, ids = crashed_and_restarted["arrivals"], crashed_and_restarted["ids"]
    waiting = crashed_and_restarted["waiting"]
    for path in ("single", "batched"):
        held = {e for row in waiting if row.subscription_id == ids[path] for e in row.event_ids}
        assert arrivals.events[f"/{path}"] | held >= set(crashed_and_restarted["event_ids"]), path
    single = {message_id(e, ids["single"]) for e in crashed_and_restarted["event_ids"]}
    assert single <= set(arrivals.at) | {row.webhook_id for row in waiting}


def test_no_request_arrives_after_its_success_was_logged(crashed_and_restarted: dict) -> None:
    arrivals, logged = crashed_and_restarted["arrivals"], crashed_and_restarted["logged"]
    late = {webhook_id: times for webhook_id, times in arrivals.at.items()
            if webhook_id in logged and max(times) > logged[webhook_id] + 0.5}
    assert late == {}
    resent = {webhook_id for webhook_id, times in arrivals.at.items() if len(times) > 1}
    # Only what went out before the job died, unlogged, may go out again.
    assert resent <= crashed_and_restarted["sent_before_kill"]
