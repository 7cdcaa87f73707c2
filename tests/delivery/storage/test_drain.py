"""The retry path's cycle — claim, attempt, settle, bury — against real HTTP receivers on
127.0.0.1 and the real PostgreSQL, on a compressed schedule (no Spark: the retry query
only runs these steps per shard).

The shared database may hold other tests' retry entries; each test looks only at its own
webhook ids and endpoints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import orjson
import pytest
from aiohttp import web
from sqlalchemy import select, update
from standardwebhooks import Webhook

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder, loopback_transport
from tests.waiting import wait_for
from wayline.core.secret import Secret
from wayline.delivery.attempt import Pending, WillRetry
from wayline.delivery.circuit import CircuitSettings, CircuitState, process_breakers
from wayline.delivery.operations import dead_lettered_events
from wayline.delivery.outcomes import Outcome
from wayline.delivery.retry import RetryPolicy
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.storage.drain import RetryQueue, run_retry_stage
from wayline.delivery.storage.store import (
    AttemptLogEntry,
    DeadLetterEntry,
    DeliveryLogEntry,
    EndpointHealth,
    PostgresDeliveryStore,
    RetryEntry,
)
from wayline.delivery.targets import Target
from wayline.delivery.transports.base import EndpointLimits, Failure, FailureKind
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointPatch, EndpointService
from wayline.registry.models import Endpoint

pytestmark = pytest.mark.integration

SECRET = Secret.generate()
STEP_S = 0.3
# Attempts at once, then 0.3 s, 0.6 s, 0.9 s later: the production schedule, compressed.
SCHEDULE = tuple(timedelta(seconds=STEP_S * n) for n in range(4))
# A breaker that tolerates these tests' deliberate failures; the breaker has a test of its own.
LENIENT = CircuitSettings(consecutive_failures=100, min_calls=100, window=100)
STAGE = StageSettings(deadline_s=2.0, policy=RetryPolicy(schedule=SCHEDULE, jitter=0.0), circuit=LENIENT)


def target(endpoint_id: str, url: str, **limits: int) -> Target:
    return Target(endpoint_id, url, timeout_s=2, limits=EndpointLimits(**limits), secrets=(SECRET,))


def pending(endpoint_id: str, event_id: str) -> Pending:
    body = orjson.dumps({"specversion": "1.0", "id": event_id, "source": "/drain", "type": "t", "tenantid": "7"})
    return Pending.single(event_id, body, subscription_id=f"sub_{endpoint_id}", endpoint_id=endpoint_id,
                          now=datetime.now(UTC))


def failing_then_ok(recorder: Recorder, failures: int, fail: Callable[[], web.Response]):
    seen: Counter[str] = Counter()

    async def handler(request: web.Request) -> web.Response:
        received = await recorder.record(request)
        seen[received.headers["webhook-id"]] += 1
        return fail() if seen[received.headers["webhook-id"]] <= failures else web.Response(status=204)

    return handler


def drain_until(queue: RetryQueue, targets: dict[str, Target], done: Callable[[], bool], stage: StageSettings = STAGE,
                timeout_s: float = 20) -> None:
    """What the retry query does each micro-batch, in a loop: claim due entries, attempt, settle."""
    def finished() -> bool:
        if done():
            return True
        claims = queue.claim(0, 1, 1000, timedelta(seconds=30), datetime.now(UTC))
        run_retry_stage(claims, targets, queue, loopback_transport, stage)
        return False

    wait_for(finished, "the retry path to finish", timeout_s, every_s=0.02)


def falls_due(database, webhook_id: str) -> Callable[[], bool]:
    """Whether the retry entry is due (its lease, if claimed, run out): what the drain query asks."""
    def due() -> bool:
        (entry,) = rows(database, RetryEntry, webhook_id=webhook_id)
        return entry.due_at <= datetime.now(UTC)
    return due


def rows(database, model, **where) -> list:
    with database.transaction() as session:
        query = select(model)
        for name, value in where.items():
            query = query.where(getattr(model, name) == value)
        return list(session.scalars(query))


def test_a_receiver_that_fails_k_times_gets_each_message_once_after_k_spaced_failures(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_flaky"
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    with Receivers() as receivers:
        base = receivers.serve({"/flaky": failing_then_ok(recorder, 2, lambda: web.Response(status=503))})
        targets = {endpoint: target(endpoint, f"{base}/flaky")}
        messages = [pending(endpoint, f"{unique}-{n}") for n in range(3)]
        run_stage(messages, targets, store, loopback_transport, STAGE)
        ids = {m.webhook_id for m in messages}
        drain_until(queue, targets, lambda: len(rows(database, DeliveryLogEntry, endpoint_id=endpoint)) == 3)

    for message in messages:
        got = [r for r in recorder.requests if r.headers["webhook-id"] == message.webhook_id]
        assert len(got) == 3, "two failures, then the success, and nothing after it"
        for request in got:
            assert Webhook(SECRET.text).verify(request.body, request.headers)["id"] == message.event_ids[0]
            assert request.body == message.payload
        gaps = [later.at - earlier.at for earlier, later in pairwise(got)]
        assert gaps[0] >= SCHEDULE[1].total_seconds() - 0.02
        assert gaps[1] >= SCHEDULE[2].total_seconds() - 0.02
    logged = rows(database, DeliveryLogEntry, endpoint_id=endpoint)
    assert {r.webhook_id for r in logged} == ids and {r.attempt for r in logged} == {3}
    failed = rows(database, AttemptLogEntry, endpoint_id=endpoint)
    assert Counter((r.webhook_id, r.attempt, r.status) for r in failed) == Counter(
        (i, n, 503) for i in ids for n in (1, 2))
    assert rows(database, RetryEntry, endpoint_id=endpoint) == []


def test_a_receiver_that_always_fails_is_dead_lettered_with_every_attempt(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_down"
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    with Receivers() as receivers:
        base = receivers.serve({"/down": failing_then_ok(recorder, 99, lambda: web.Response(status=500, text="boom"))})
        targets = {endpoint: target(endpoint, f"{base}/down")}
        message = pending(endpoint, f"{unique}-dead")
        run_stage([message], targets, store, loopback_transport, STAGE)

        def dead() -> bool:
            return any(r.dead_reason for r in rows(database, RetryEntry, webhook_id=message.webhook_id))

        drain_until(queue, targets, dead)
    assert len(recorder.requests) == len(SCHEDULE)
    announced: list = []
    queue.bury(5000, datetime.now(UTC), announced.extend)
    (letter,) = rows(database, DeadLetterEntry, webhook_id=message.webhook_id)
    assert (letter.reason, letter.attempts, letter.payload) == ("exhausted", len(SCHEDULE), message.payload)
    assert letter.last_error == "HTTP 500: boom" and letter.id.startswith("dl_")
    assert rows(database, RetryEntry, webhook_id=message.webhook_id) == []
    attempts = rows(database, AttemptLogEntry, webhook_id=message.webhook_id)
    assert sorted(a.attempt for a in attempts) == list(range(1, len(SCHEDULE) + 1))
    assert [b.webhook_id for b in announced if b.endpoint_id == endpoint] == [message.webhook_id]
    # Its endpoint is not in the registry, so no customer to tell: no operational event.
    assert dead_lettered_events([b for b in announced if b.endpoint_id == endpoint]) == []
    # The main path never sends a dead letter again.
    assert store.screen([message.webhook_id], (), ()).settled == {message.webhook_id}


def test_retry_after_on_429_is_honoured(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_busy"
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    with Receivers() as receivers:
        base = receivers.serve({"/busy": failing_then_ok(
            recorder, 1, lambda: web.Response(status=429, headers={"Retry-After": "2"}))})
        targets = {endpoint: target(endpoint, f"{base}/busy")}
        message = pending(endpoint, f"{unique}-busy")
        run_stage([message], targets, store, loopback_transport, STAGE)
        drain_until(queue, targets, lambda: bool(rows(database, DeliveryLogEntry, webhook_id=message.webhook_id)))
    first, second = recorder.requests
    # The schedule says 0.3 s; the receiver asked for 2 s.
    assert second.at - first.at >= 2.0 - 0.02


def test_410_gone_dead_letters_at_once(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_gone"
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    with Receivers() as receivers:
        base = receivers.serve({"/gone": failing_then_ok(recorder, 99, lambda: web.Response(status=410))})
        targets = {endpoint: target(endpoint, f"{base}/gone")}
        message = pending(endpoint, f"{unique}-gone")
        tally = run_stage([message], targets, store, loopback_transport, STAGE)
    assert tally.gone_subscriptions() == {message.subscription_id}
    queue.bury(5000, datetime.now(UTC), lambda _: None)
    (letter,) = rows(database, DeadLetterEntry, webhook_id=message.webhook_id)
    assert (letter.reason, letter.attempts) == ("gone", 1)
    assert len(recorder.requests) == 1


def test_the_circuit_breaker_opens_then_closes_on_the_retry_path(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_breaker"
    # Its own settings, so its own breakers: other tests' endpoints cannot trip them.
    circuit = CircuitSettings(consecutive_failures=2, min_calls=2, window=10, cool_down_s=0.5)
    # Spaced wider than nothing, so the cool-down does not use up the schedule.
    stage = StageSettings(deadline_s=2.0, circuit=circuit,
                          policy=RetryPolicy(schedule=(timedelta(0),) + (timedelta(seconds=STEP_S),) * 9, jitter=0.0))
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)

    async def first_two_fail(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=502 if len(recorder.requests) <= 2 else 204)

    with Receivers() as receivers:
        base = receivers.serve({"/breaker": first_two_fail})
        targets = {endpoint: target(endpoint, f"{base}/breaker", max_in_flight=1)}
        messages = [pending(endpoint, f"{unique}-{n}") for n in range(4)]
        run_stage(messages[:2], targets, store, loopback_transport, stage)
        assert process_breakers(circuit)[endpoint].state is CircuitState.OPEN
        run_stage(messages[2:], targets, store, loopback_transport, stage)
        sent_while_open = len(recorder.requests)
        drain_until(queue, targets, lambda: len(rows(database, DeliveryLogEntry, endpoint_id=endpoint)) == 4,
                    stage=stage)
    assert sent_while_open == 2, "two failures opened it; the other two were not sent"
    assert process_breakers(circuit)[endpoint].state is CircuitState.CLOSED
    errors = [a.error for a in rows(database, AttemptLogEntry, endpoint_id=endpoint)]
    assert any(e.startswith("circuit_open") for e in errors)
    assert len(recorder.requests) == 6, "two failures, then each of the four once"


def test_a_drainer_that_dies_loses_nothing_and_a_stale_settle_changes_nothing(database, unique) -> None:
    recorder = Recorder()
    endpoint = f"ep_{unique}_crash"
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    lease = timedelta(seconds=0.5)
    with Receivers() as receivers:
        base = receivers.serve({"/crash": failing_then_ok(recorder, 1, lambda: web.Response(status=500))})
        targets = {endpoint: target(endpoint, f"{base}/crash")}
        message = pending(endpoint, f"{unique}-crash")
        run_stage([message], targets, store, loopback_transport, STAGE)
        wait_for(falls_due(database, message.webhook_id), "the retry to fall due", 10, every_s=0.05)

        def mine(claims):
            return [c for c in claims if c.pending.webhook_id == message.webhook_id]

        (died,) = mine(queue.claim(0, 1, 1000, lease, datetime.now(UTC)))  # …and its drainer died here
        assert mine(queue.claim(0, 1, 1000, lease, datetime.now(UTC))) == [], "leased: nobody else takes it"
        wait_for(falls_due(database, message.webhook_id), "the lease to run out", 10, every_s=0.05)
        (again,) = mine(queue.claim(0, 1, 1000, lease, datetime.now(UTC)))
        assert again.pending.attempts == died.pending.attempts == 1
        tally = run_retry_stage([again], targets, queue, loopback_transport, STAGE)
        # The dead drainer's late outcome must not resurrect the entry.
        stale = WillRetry(replace(died.pending, attempts=2), Failure(FailureKind.DEADLINE, "late"))
        queue.settle([died], [stale], datetime.now(UTC))
    assert tally.total(Outcome.DELIVERED) == 1
    assert rows(database, RetryEntry, webhook_id=message.webhook_id) == []
    assert len(rows(database, DeliveryLogEntry, webhook_id=message.webhook_id)) == 1
    assert len(recorder.requests) == 2


def test_endpoints_failing_longer_than_the_limit_are_found_and_a_change_restarts_the_clock(
    database, api_settings, unique,
) -> None:
    endpoints = EndpointService.from_settings(api_settings)
    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name=f"Health {unique}"))
        # Nothing listens on the discard port: every attempt is refused.
        created = endpoints.create(session, ADMIN, EndpointIn(url="http://127.0.0.1:9/x", customer_id=owner.id))
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    targets = {created.id: target(created.id, "http://127.0.0.1:9/x")}
    message = pending(created.id, f"{unique}-h")
    run_stage([message], targets, store, loopback_transport, STAGE)
    drain_until(queue, targets, lambda: rows(database, RetryEntry, webhook_id=message.webhook_id)[0].attempts >= 2)

    def failing(at: datetime) -> list[str]:
        return [f.last_error for f in queue.failing_endpoints(timedelta(days=5), at) if f.endpoint_id == created.id]

    in_six_days = datetime.now(UTC) + timedelta(days=6)
    assert [error.split(":")[0] for error in failing(in_six_days)] == ["connection"]
    assert failing(datetime.now(UTC)) == [], "not failing for five days yet"
    with database.transaction() as session:
        # As if the first failure were six days old.
        session.execute(update(EndpointHealth).where(EndpointHealth.endpoint_id == created.id)
                        .values(failing_since=datetime.now(UTC) - timedelta(days=6)))
        session.execute(update(Endpoint).where(Endpoint.id == created.id)
                        .values(updated_at=datetime.now(UTC) - timedelta(days=7)))
    assert len(failing(datetime.now(UTC))) == 1
    with database.transaction() as session:
        endpoints.update(session, ADMIN, created.id, EndpointPatch(enabled=False))
    assert failing(datetime.now(UTC)) == [], "a disabled endpoint is not disabled again"
    with database.transaction() as session:
        endpoints.update(session, ADMIN, created.id, EndpointPatch(enabled=True))
    assert failing(datetime.now(UTC)) == [], "re-enabling restarts the clock"
    assert len(failing(in_six_days)) == 1


def test_retention_deletes_history_and_dead_letters_older_than_their_limits_in_batches(database, unique) -> None:
    old, cutoff, young = (datetime(year, 1, 1, tzinfo=UTC) for year in (2001, 2002, 2003))
    ages = {f"{unique}-old{n}": old + timedelta(days=n) for n in range(3)} | {f"{unique}-young": young}
    with database.transaction() as session:
        for webhook_id, at in ages.items():
            common = {"webhook_id": webhook_id, "endpoint_id": f"ep_{unique}", "subscription_id": f"sub_{unique}"}
            session.add(DeliveryLogEntry(**common, status=200, latency_ms=3, attempt=1, delivered_at=at))
            session.add(AttemptLogEntry(**common, attempt=1, status=500, error="HTTP 500", latency_ms=3,
                                        attempted_at=at))
            session.add(DeadLetterEntry(**common, id=f"dl_{webhook_id}", customer_id=None, kind="single",
                                        event_ids=[webhook_id], payload=b"{}", attempts=8, reason="exhausted",
                                        last_error="HTTP 500", first_attempt_at=at, dead_at=at))
    queue = RetryQueue(database.engine)
    assert queue.expire(cutoff, cutoff, limit=2) is True, "two of three old rows per table: more may be left"
    assert queue.expire(cutoff, cutoff, limit=2) is False
    for model in (DeliveryLogEntry, AttemptLogEntry, DeadLetterEntry):
        left = {row.webhook_id for row in rows(database, model, endpoint_id=f"ep_{unique}")}
        assert left == {f"{unique}-young"}, model.__tablename__
    queue.expire(cutoff, young + timedelta(days=1), limit=10)
    assert rows(database, DeadLetterEntry, endpoint_id=f"ep_{unique}") == [], "dead letters have their own limit"
    assert len(rows(database, DeliveryLogEntry, endpoint_id=f"ep_{unique}")) == 1


def test_a_subscription_whose_endpoint_answered_410_gets_nothing_more_on_either_path(
    database, api_settings, unique,
) -> None:
    """Whatever snapshot a sender holds: the 410's mark in the store stops it, until the
    subscription changes again (re-enabled by its customer)."""
    recorder = Recorder()
    answer = {"status": 410}

    async def handler(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=answer["status"])

    endpoints = EndpointService.from_settings(api_settings)
    queue, store = RetryQueue(database.engine), PostgresDeliveryStore(database.engine)
    with Receivers() as receivers:
        base = receivers.serve({"/gone": handler})
        with database.transaction() as session:
            catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=f"gone.{unique}"))
            owner = customer.create(session, ADMIN, customer.CustomerIn(name=f"Gone {unique}"))
            created = endpoints.create(session, ADMIN, EndpointIn(url=f"{base}/gone", customer_id=owner.id))
            sub = subscription.create(session, ADMIN, subscription.SubscriptionIn(
                endpoint_id=created.id, event_types=[f"gone.{unique}"])).id
        targets = {created.id: target(created.id, f"{base}/gone")}

        def message(event_id: str) -> Pending:
            return replace(pending(created.id, f"{unique}-{event_id}"), subscription_id=sub)

        first = message("first")
        tally = run_stage([first], targets, store, loopback_transport, STAGE)
        assert tally.gone_subscriptions() == {sub} and len(recorder.requests) == 1
        # Later micro-batches, with a snapshot from before the 410: nothing is sent.
        later = message("later")
        run_stage([later], targets, store, loopback_transport, STAGE)
        # The retry path: an entry of that subscription, due now, is not sent either.
        retried = message("retried")
        with database.transaction() as session:
            session.add(RetryEntry(webhook_id=retried.webhook_id, kind="single", endpoint_id=created.id,
                                   subscription_id=sub, event_ids=list(retried.event_ids), payload=retried.payload,
                                   attempts=1, due_at=datetime.now(UTC) - timedelta(seconds=1), last_error="HTTP 500"))
        drain_until(queue, targets,
                    lambda: rows(database, RetryEntry, webhook_id=retried.webhook_id)[0].dead_reason is not None)
        assert len(recorder.requests) == 1
        for unsent, attempts in ((later, 0), (retried, 1)):
            (entry,) = rows(database, RetryEntry, webhook_id=unsent.webhook_id)
            assert (entry.dead_reason, entry.attempts) == ("rejected", attempts), "dead-lettered unsent"
            assert "410 Gone" in entry.last_error
            assert [a.held_back for a in rows(database, AttemptLogEntry, webhook_id=unsent.webhook_id)] == [True]
        # The customer re-enables it (any change): it is sent to again.
        answer["status"] = 204
        with database.transaction() as session:
            subscription.update(session, ADMIN, sub, subscription.SubscriptionPatch(enabled=False))
        with database.transaction() as session:
            subscription.update(session, ADMIN, sub, subscription.SubscriptionPatch(enabled=True))
        again = message("again")
        assert run_stage([again], targets, store, loopback_transport, STAGE).total(Outcome.DELIVERED) == 1
    assert len(recorder.requests) == 2
