"""The retry drain end to end, beside the delivery job: events produced to the real broker,
endpoints in the real registry, real HTTP receivers on 127.0.0.1, a compressed schedule.

One scenario for the module (Spark, for the delivery job, is the expensive part):

1. the delivery job and the retry drain start; events for three endpoints follow — one
   that fails twice per message then recovers, one that always fails, and a customer's
   operations endpoint subscribed to Wayline's own ``wayline.*`` events;
2. once retries are under way the retry drain is stopped mid-run and, to be sure an
   attempt is cut short, a drainer "dies" holding a claim; a new drain starts;
3. the always-failing endpoint's messages are dead-lettered and it is disabled for
   failing too long; both are announced on the operations topic, which the delivery
   job delivers to the operations endpoint like any other event.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise

import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer
from sqlalchemy import select
from standardwebhooks import Webhook

from tests import waiting
from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder
from wayline.core.kafka import ensure_topics
from wayline.core.secret import Secret
from wayline.core.settings import DeliverySettings, Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.signing import message_id
from wayline.delivery.storage.drain import RetryQueue
from wayline.delivery.storage.store import AttemptLogEntry, DeadLetterEntry, DeliveryLogEntry, RetryEntry
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.catalog import ENDPOINT_DISABLED, MESSAGE_DEAD_LETTERED
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.registry.models import Endpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PREFIX = "events.rty."
TOPIC = f"{PREFIX}orders"
EVENT_TYPE = "rty.order.created"
FAILURES = 2
# Few, so the default circuit breaker (five consecutive failures) stays closed for the
# flaky endpoint: its messages must exhaust nothing but their planned failures.
MESSAGES = 2
SCHEDULE_S = [0.0, 1.0, 1.0, 1.0]
LEASE_S = 3.0
# Breakers live as long as the process, across the retry drain's restart: the down
# endpoint's retries are MESSAGES * 3 failures in a row, and an open circuit would hold a
# retry back for its cool-down whenever two messages' retries fell in different passes.
CIRCUIT_FAILURES = MESSAGES * len(SCHEDULE_S) + 1


@dataclass
class Scenario:
    recorder: Recorder
    secrets: dict[str, Secret]
    endpoint_ids: dict[str, str]
    subscription_ids: dict[str, str]
    wall: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Per webhook id: (wall-clock time, status answered) of every request."""
    stopped_with_pending: int = 0
    log: list[DeliveryLogEntry] = field(default_factory=list)
    dead: list[DeadLetterEntry] = field(default_factory=list)
    attempts: list[AttemptLogEntry] = field(default_factory=list)
    down_endpoint: Endpoint | None = None

    def ids(self, name: str) -> set[str]:
        return {message_id(f"rty-{n}", self.subscription_ids[name]) for n in range(MESSAGES)}


# The retry path's schedule and leases make its waits longer than the default.
wait_for = partial(waiting.wait_for, timeout_s=180)


@pytest.fixture(scope="module")
def scenario(api_settings: Settings, database, spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    from wayline.delivery.runtime.retries import start_retries
    from wayline.pipelines.delivery import start_delivery

    settings = api_settings.model_copy(update={
        "kafka": api_settings.kafka.model_copy(update={"event_topic_prefix": PREFIX}),
        "delivery": DeliverySettings(
            stage_deadline_s=2.0, version_poll_s=0.5, trigger_interval_s=0.5, send_partitions=2,
            retry_schedule_s=SCHEDULE_S, retry_jitter=0.0, retry_poll_s=0.5, retry_lease_s=LEASE_S,
            circuit_consecutive_failures=CIRCUIT_FAILURES,
            # Long enough that the down endpoint's messages are all dead before it is disabled,
            # even on a loaded machine where the retry drain's restart below takes seconds: a
            # message still pending when its endpoint is disabled is dead-lettered "rejected".
            disable_after_s=40.0, operations_topic=f"{PREFIX}operations",
        ),
    })
    ensure_topics(settings.kafka_bootstrap(), [TOPIC], 2)
    root = tmp_path_factory.mktemp("retries")
    endpoints = EndpointService.from_settings(settings)
    recorder = Recorder()
    record = Scenario(recorder, {}, {}, {})
    seen: Counter[str] = Counter()

    async def answer(request: web.Request, status: int) -> web.Response:
        received = await recorder.record(request)
        record.wall.setdefault(received.headers["webhook-id"], []).append((time.time(), status))
        return web.Response(status=status, text="" if status < 300 else "not now")

    async def flaky(request: web.Request) -> web.Response:
        webhook_id = request.headers["webhook-id"]
        seen[webhook_id] += 1
        return await answer(request, 503 if seen[webhook_id] <= FAILURES else 204)

    async def down(request: web.Request) -> web.Response:
        return await answer(request, 500)

    async def ops(request: web.Request) -> web.Response:
        return await answer(request, 204)

    with Receivers() as receivers:
        base = receivers.serve({"/flaky": flaky, "/down": down, "/ops": ops})
        with database.transaction() as s:
            catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id="rty-t")])
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=EVENT_TYPE))
            owner = customer.create(s, ADMIN, customer.CustomerIn(name="Retry Co"))
            for name in ("flaky", "down", "ops"):
                record.secrets[name] = Secret.generate()
                record.endpoint_ids[name] = endpoints.create(s, ADMIN, EndpointIn(
                    url=f"{base}/{name}", customer_id=owner.id, secret=record.secrets[name].text)).id
            for name in ("flaky", "down"):
                record.subscription_ids[name] = subscription.create(s, ADMIN, subscription.SubscriptionIn(
                    endpoint_id=record.endpoint_ids[name], event_types=[EVENT_TYPE])).id
            # No filter: the registry routes operational events to their own customer, so the
            # dead letters of other tests' customers (the same query drains them) stay away.
            record.subscription_ids["ops"] = subscription.create(s, ADMIN, subscription.SubscriptionIn(
                endpoint_id=record.endpoint_ids["ops"], event_types=[MESSAGE_DEAD_LETTERED, ENDPOINT_DISABLED])).id

        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap()})
        for n in range(MESSAGES):
            producer.produce(TOPIC, orjson.dumps({"specversion": "1.0", "id": f"rty-{n}", "source": "/rty",
                                                  "type": EVENT_TYPE, "tenantid": "rty-t", "data": {"n": n}}))
        assert producer.flush(30) == 0

        def logged(name: str) -> set[str]:
            with database.transaction() as s:
                return set(s.scalars(select(DeliveryLogEntry.webhook_id).where(
                    DeliveryLogEntry.endpoint_id == record.endpoint_ids[name])))

        def pending(name: str) -> int:
            with database.transaction() as s:
                return len(list(s.scalars(select(RetryEntry.webhook_id).where(
                    RetryEntry.endpoint_id == record.endpoint_ids[name]))))

        def enabled(name: str) -> bool:
            with database.transaction() as s:
                return s.get(Endpoint, record.endpoint_ids[name]).enabled

        job = start_delivery(spark, settings, database, endpoints, DeliveryMetrics(), checkpoint=root / "delivery")
        retries = start_retries(settings, database, endpoints)
        try:
            # Act 2: retries under way (each flaky message answered at least once more), then a stop.
            wait_for(lambda: sum(1 for i in record.ids("flaky") if len(record.wall.get(i, [])) >= 2) >= 1
                     or not retries.isActive, "the first retries")
            assert retries.isActive, retries.exception()
            retries.stop()
            record.stopped_with_pending = pending("flaky") + pending("down")
            # A drainer that died holding claims: its entries come back when the lease runs out.
            RetryQueue(database.engine).claim(0, 1, 1000, timedelta(seconds=LEASE_S), datetime.now(UTC))
            retries = start_retries(settings, database, endpoints)

            wait_for(lambda: logged("flaky") == record.ids("flaky") or not retries.isActive, "the flaky endpoint")
            wait_for(lambda: not enabled("down") or not retries.isActive, "the down endpoint to be disabled")
            wait_for(lambda: len(logged("ops")) >= MESSAGES + 1 or not job.isActive, "the operational events")
            assert retries.isActive, retries.exception()
            assert job.isActive, job.exception()
        finally:
            retries.stop()
            job.stop()
        with database.transaction() as s:
            ours = list(record.endpoint_ids.values())
            record.log = list(s.scalars(select(DeliveryLogEntry).where(DeliveryLogEntry.endpoint_id.in_(ours))))
            record.dead = list(s.scalars(select(DeadLetterEntry).where(DeadLetterEntry.endpoint_id.in_(ours))))
            record.attempts = list(s.scalars(select(AttemptLogEntry).where(AttemptLogEntry.endpoint_id.in_(ours))))
            record.down_endpoint = s.get(Endpoint, record.endpoint_ids["down"])
    yield record


def test_each_message_of_a_flaky_receiver_succeeds_once_after_its_failures(scenario: Scenario) -> None:
    for webhook_id in scenario.ids("flaky"):
        statuses = [status for _, status in scenario.wall[webhook_id]]
        assert statuses[:FAILURES] == [503] * FAILURES
        assert statuses.count(204) == 1, "exactly one success, even across the restart"
        times = [at for at, _ in scenario.wall[webhook_id]]
        assert all(later - earlier >= SCHEDULE_S[1] - 0.05 for earlier, later in pairwise(times))
    logged = Counter(e.webhook_id for e in scenario.log if e.endpoint_id == scenario.endpoint_ids["flaky"])
    assert logged == Counter({i: 1 for i in scenario.ids("flaky")})


def test_the_stop_left_entries_and_none_was_lost(scenario: Scenario) -> None:
    assert scenario.stopped_with_pending > 0, "the stop came while retries were still pending"
    delivered = {e.webhook_id for e in scenario.log}
    dead = {d.webhook_id for d in scenario.dead}
    assert scenario.ids("flaky") <= delivered
    assert scenario.ids("down") == dead


def test_nothing_is_sent_after_its_success_was_logged(scenario: Scenario) -> None:
    for entry in scenario.log:
        after = [at for at, _ in scenario.wall.get(entry.webhook_id, []) if at > entry.delivered_at.timestamp() + 0.5]
        assert after == [], f"{entry.webhook_id} was sent again after its logged success"


def test_an_always_failing_receiver_is_dead_lettered_with_every_attempt_and_disabled(scenario: Scenario) -> None:
    assert {d.reason for d in scenario.dead} == {"exhausted"}
    assert {d.attempts for d in scenario.dead} == {len(SCHEDULE_S)}
    down = scenario.endpoint_ids["down"]
    # A held-back row says why a delivery waited; it is no attempt (docs/decisions.md).
    per_message = Counter(a.webhook_id for a in scenario.attempts if a.endpoint_id == down and not a.held_back)
    assert per_message == Counter({i: len(SCHEDULE_S) for i in scenario.ids("down")})
    assert {i: len(scenario.wall[i]) for i in scenario.ids("down")} == dict.fromkeys(scenario.ids("down"), len(SCHEDULE_S))
    endpoint = scenario.down_endpoint
    assert endpoint is not None and not endpoint.enabled
    assert endpoint.disabled_reason.startswith("disabled automatically: every delivery has failed since")
    assert "HTTP 500" in endpoint.disabled_reason


def test_operational_events_reach_the_operations_endpoint_signed(scenario: Scenario) -> None:
    ops = [r for r in scenario.recorder.requests if r.path == "/ops"]
    events = [Webhook(scenario.secrets["ops"].text).verify(r.body, r.headers) for r in ops]
    dead = [e for e in events if e["type"] == MESSAGE_DEAD_LETTERED]
    assert {e["data"]["webhook_id"] for e in dead} == scenario.ids("down")
    assert {e["data"]["reason"] for e in dead} == {"exhausted"}
    (disabled,) = {e["id"]: e for e in events if e["type"] == ENDPOINT_DISABLED}.values()
    assert disabled["data"]["endpoint_id"] == scenario.endpoint_ids["down"]
    assert disabled["tenantid"] == scenario.down_endpoint.customer_id
