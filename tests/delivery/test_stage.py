"""One delivery stage against real HTTP servers on 127.0.0.1 and the real PostgreSQL store."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from aiohttp import web
from sqlalchemy import select, update
from standardwebhooks import Webhook

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Handler, Recorder, loopback_transport
from tests.waiting import wait_for
from wayline.core.secret import Secret
from wayline.core.settings import DeliverySettings
from wayline.delivery.attempt import DeadLettered, DeadLetterReason, Pending, State, settle
from wayline.delivery.circuit import CircuitSettings, process_breakers
from wayline.delivery.memory import MemoryStore, webhook_id
from wayline.delivery.outcomes import Outcome
from wayline.delivery.retry import DEFAULT_RETRY_POLICY
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.storage.drain import RetryQueue
from wayline.delivery.storage.store import (
    GONE_REASON,
    AttemptLogEntry,
    DeliveryLogEntry,
    EndpointHealth,
    GoneSubscription,
    PostgresDeliveryStore,
    RetryEntry,
)
from wayline.delivery.targets import Target
from wayline.delivery.transports.base import EndpointLimits, Failure, FailureKind, Request, Response, Result
from wayline.delivery.transports.memory import MemoryTransport

SECRET = Secret.generate()
DEADLINE_S = 0.5


def target(endpoint_id: str, url: str, problem: str | None = None) -> Target:
    return Target(endpoint_id, url, timeout_s=5, limits=EndpointLimits(), secrets=() if problem else (SECRET,),
                  problem=problem)


def single(tag: str, event: str, endpoint_id: str) -> Pending:
    body = orjson.dumps({"specversion": "1.0", "id": event, "source": "/s", "type": "t", "tenantid": "7"})
    return Pending.single(event, body, subscription_id=f"sub_{tag}_{endpoint_id}", endpoint_id=endpoint_id,
                          now=datetime.now(UTC))


def test_the_default_settings_give_the_default_retry_policy_and_breakers() -> None:
    settings = StageSettings.from_settings(DeliverySettings())
    assert settings.policy == DEFAULT_RETRY_POLICY
    assert settings.circuit == CircuitSettings()
    tuned = StageSettings.from_settings(DeliverySettings(circuit_consecutive_failures=2, circuit_cool_down_s=1.5))
    assert (tuned.circuit.consecutive_failures, tuned.circuit.cool_down_s) == (2, 1.5)
    assert settings.deadline_s == DeliverySettings().stage_deadline_s


def test_an_endpoints_own_schedule_and_retried_statuses_replace_the_deployments() -> None:
    settings = StageSettings(deadline_s=1, policy=replace(DEFAULT_RETRY_POLICY, jitter=0.1))
    plain = target("ep_plain", "http://127.0.0.1:9/")
    assert settings.policy_for(plain) is settings.policy and settings.policy_for(None) is settings.policy
    own = replace(plain, retry_schedule=(timedelta(0), timedelta(seconds=7)), retry_statuses=frozenset({404}))
    policy = settings.policy_for(own)
    assert (policy.schedule, policy.retry_statuses, policy.jitter) == (own.retry_schedule, {404}, 0.1)
    statuses_only = settings.policy_for(replace(plain, retry_statuses=frozenset({400})))
    assert statuses_only.schedule == DEFAULT_RETRY_POLICY.schedule and statuses_only.retry_statuses == {400}


@pytest.mark.integration
def test_a_stage_settles_each_endpoint_on_its_own_retry_policy(database, unique: str) -> None:
    async def bad_request(request: web.Request) -> web.Response:
        return web.Response(status=400, text="nope")

    async def unavailable(request: web.Request) -> web.Response:
        return web.Response(status=503, text="later")

    store = PostgresDeliveryStore(database.engine)
    ids = {name: f"ep_{unique}_{name}" for name in ("default", "retries400", "once")}
    with Receivers() as receivers:
        base = receivers.serve({"/400": bad_request, "/503": unavailable})
        targets = {
            ids["default"]: target(ids["default"], f"{base}/400"),
            ids["retries400"]: replace(target(ids["retries400"], f"{base}/400"), retry_statuses=frozenset({400}),
                                       retry_schedule=(timedelta(0), timedelta(seconds=100))),
            ids["once"]: replace(target(ids["once"], f"{base}/503"), retry_schedule=(timedelta(0),)),
        }
        started = datetime.now(UTC)
        run_stage([single(unique, f"own-{name}", ids[name]) for name in ids], targets, store, loopback_transport,
                  StageSettings(deadline_s=5))
    with database.transaction() as session:
        entries = session.scalars(select(RetryEntry).where(RetryEntry.endpoint_id.in_(ids.values())))
        handed = {r.endpoint_id: r for r in entries}
    assert handed[ids["default"]].dead_reason == "rejected", "400 is not retried by default"
    retried = handed[ids["retries400"]]
    assert retried.dead_reason is None
    assert started + timedelta(seconds=79) < retried.due_at < datetime.now(UTC) + timedelta(seconds=121), \
        "the endpoint's 100 s, with 20% jitter"
    assert handed[ids["once"]].dead_reason == "exhausted", "a one-attempt schedule has no retry left"


@pytest.mark.integration
def test_a_failing_endpoints_deliveries_go_to_the_retry_path_unsent_and_unattempted(database, unique: str) -> None:
    recorder = Recorder()

    async def ok(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    store = PostgresDeliveryStore(database.engine)
    ids = {name: f"ep_{unique}_{name}" for name in ("healthy", "failing")}
    with Receivers() as receivers:
        base = receivers.serve({"/ok": ok})
        targets = {ids[name]: target(ids[name], f"{base}/ok") for name in ids}
        pendings = [single(unique, f"defer-{name}", ids[name]) for name in ids]
        before = datetime.now(UTC)
        tally = run_stage(pendings, targets, store, loopback_transport, StageSettings(deadline_s=5),
                          failing=frozenset({ids["failing"]}))
    assert [Webhook(SECRET.text).verify(r.body, r.headers)["id"] for r in recorder.requests] == ["defer-healthy"]
    assert tally.total(Outcome.DELIVERED) == 1 and tally.total(Outcome.RETRIED) == 1
    deferred = pendings[1].webhook_id
    with database.transaction() as session:
        [entry] = session.scalars(select(RetryEntry).where(RetryEntry.webhook_id == deferred))
        logged_attempts = session.scalars(select(AttemptLogEntry).where(AttemptLogEntry.webhook_id == deferred)).all()
    assert (entry.attempts, entry.dead_reason) == (0, None), "no attempt was made or counted"
    assert before <= entry.due_at <= datetime.now(UTC), "due at once"
    assert entry.last_error.startswith("deferred: ") and logged_attempts == []


def test_an_endpoint_cut_as_a_straggler_goes_to_the_retry_path_in_later_stages(database, unique: str) -> None:
    recorder = Recorder()

    async def ok(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    async def hangs(request: web.Request) -> web.Response:
        await recorder.record(request)
        await asyncio.sleep(30)
        return web.Response(status=204)

    store = PostgresDeliveryStore(database.engine)
    ids = {name: f"ep_{unique}_{name}" for name in ("healthy", "new-and-hanging")}
    settings = StageSettings(deadline_s=20, straggler_cut_s=0.3, slow_for_s=60)
    with Receivers() as receivers:
        base = receivers.serve({"/ok": ok, "/hang": hangs})
        targets = {ids["healthy"]: target(ids["healthy"], f"{base}/ok"),
                   ids["new-and-hanging"]: target(ids["new-and-hanging"], f"{base}/hang")}
        started = time.monotonic()
        first = run_stage([single(unique, f"cold-{name}", ids[name]) for name in ids], targets, store,
                          loopback_transport, settings)
        cold_s = time.monotonic() - started
        started = time.monotonic()
        second = run_stage([single(unique, f"warm-{name}", ids[name]) for name in ids], targets, store,
                           loopback_transport, settings)
        warm_s = time.monotonic() - started
    assert cold_s < 5, "the first stage waited 0.3 s after the healthy endpoint was served, not 20 s"
    assert first.total(Outcome.DELIVERED) == 1 and first.total(Outcome.RETRIED) == 1
    assert warm_s < 2 and second.total(Outcome.DELIVERED) == 1 and second.total(Outcome.RETRIED) == 1
    assert sorted(r.path for r in recorder.requests) == ["/hang", "/ok", "/ok"], "the slow one was not sent again"
    with database.transaction() as session:
        errors = dict(session.execute(select(RetryEntry.webhook_id, RetryEntry.last_error)
                                      .where(RetryEntry.endpoint_id == ids["new-and-hanging"])).all())
    assert len(errors) == 2 and sorted(e.split(":")[0] for e in errors.values()) == ["deadline", "deferred"]


@pytest.mark.integration
def test_a_stage_sends_once_within_its_deadline_and_keeps_every_outcome(database, unique: str) -> None:
    recorder = Recorder()

    def answering(status: int) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            await recorder.record(request)
            return web.Response(status=status, text="" if status < 300 else "nope")
        return handler

    async def hangs(request: web.Request) -> web.Response:
        await recorder.record(request)
        await asyncio.sleep(60)
        return web.Response(status=200)

    store = PostgresDeliveryStore(database.engine)
    settings = StageSettings(deadline_s=DEADLINE_S)
    with Receivers() as receivers:
        base = receivers.serve({"/ok": answering(200), "/busy": answering(503), "/bad": answering(400),
                                "/gone": answering(410), "/hang": hangs})
        ids = {name: f"ep_{unique}_{name}" for name in ("ok", "busy", "bad", "gone", "hang", "nosecret", "missing")}
        targets = {ids[name]: target(ids[name], f"{base}/{name}") for name in ("ok", "busy", "bad", "gone", "hang")}
        targets[ids["nosecret"]] = target(ids["nosecret"], f"{base}/ok", problem="no active signing secret")
        pendings = [single(unique, f"e-{name}", ids[name]) for name in ids]
        pendings.append(single(unique, "e-ok", ids["ok"]))  # the same webhook id again

        started = time.monotonic()
        tally = run_stage(pendings, targets, store, loopback_transport, settings)
        took = time.monotonic() - started
        again = run_stage(pendings, targets, store, loopback_transport, settings)

    assert took < DEADLINE_S + 2, "the stage does not wait for the hanging endpoint beyond its deadline"
    by_path = {r.path: r for r in recorder.requests}
    assert sorted(by_path) == ["/bad", "/busy", "/gone", "/hang", "/ok"]
    assert len(recorder.requests) == 5, "the duplicate went out once, the replay sent nothing"
    assert Webhook(SECRET.text).verify(by_path["/ok"].body, by_path["/ok"].headers)["id"] == "e-ok"

    assert tally.total(Outcome.DELIVERED) == 1
    assert tally.total(Outcome.RETRIED) == 3  # 503, the deadline, no secret
    assert tally.total(Outcome.DEAD_LETTERED) == 3  # 400, 410, endpoint gone from the snapshot
    assert tally.total(Outcome.SKIPPED) == 1
    assert tally.gone_subscriptions() == {f"sub_{unique}_{ids['gone']}"}
    assert again.total(Outcome.SKIPPED) == len(pendings) and again.total(Outcome.DELIVERED) == 0

    webhook = {p.endpoint_id: p.webhook_id for p in pendings}
    with database.transaction() as session:
        [logged] = session.scalars(select(DeliveryLogEntry).where(DeliveryLogEntry.webhook_id.in_(webhook.values())))
        handed = {r.endpoint_id: r for r in session.scalars(
            select(RetryEntry).where(RetryEntry.webhook_id.in_(webhook.values())))}
    assert (logged.webhook_id, logged.status, logged.attempt) == (webhook[ids["ok"]], 200, 1)
    assert set(handed) == set(ids.values()) - {ids["ok"]}
    expect = {
        "busy": (None, "HTTP 503: nope"),
        "hang": (None, "deadline: no response within the 0.5 s delivery deadline"),
        "nosecret": (None, "auth: no active signing secret"),
        "bad": ("rejected", "HTTP 400: nope"),
        "gone": (GONE_REASON, "HTTP 410: nope"),
        "missing": ("rejected", f"invalid_request: endpoint {ids['missing']} is disabled or deleted"),
    }
    for name, (dead_reason, error) in expect.items():
        row = handed[ids[name]]
        assert (row.dead_reason, row.last_error, row.attempts, row.kind) == (dead_reason, error, 1, "single")
        assert row.payload == next(p.payload for p in pendings if p.endpoint_id == ids[name])
    assert handed[ids["busy"]].due_at > datetime.now(UTC) + timedelta(seconds=2), "the schedule's 5 s, with jitter"


@pytest.mark.integration
def test_the_store_writes_are_idempotent_and_settle_what_they_wrote(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    now = datetime.now(UTC)
    ok, failing = single(unique, "e-1", "ep_1"), single(unique, "e-2", "ep_1")
    states = [settle(ok, Response(204, {}, b"", 0.01), now, random.Random(1)),
              settle(failing, Failure(FailureKind.TIMEOUT, "slow", 5.0), now, random.Random(1))]
    assert store.screen([ok.webhook_id, failing.webhook_id], (), ()).settled == set()
    store.record(states)
    store.record(states)  # a replayed stage writes the same rows again
    store.record([])
    assert store.screen([ok.webhook_id, failing.webhook_id, f"msg_{unique}"], (), ()).settled == {ok.webhook_id, failing.webhook_id}
    with database.transaction() as session:
        assert session.get(DeliveryLogEntry, ok.webhook_id).latency_ms == 10
        assert session.get(RetryEntry, failing.webhook_id).last_error == "timeout: slow"


def attempt_log(database, webhook_ids: list[str]) -> list[AttemptLogEntry]:
    with database.transaction() as session:
        return list(session.scalars(select(AttemptLogEntry).where(AttemptLogEntry.webhook_id.in_(webhook_ids))
                                    .order_by(AttemptLogEntry.id)))


def handed_over(database, webhook_ids: list[str]) -> dict[str, RetryEntry]:
    with database.transaction() as session:
        return {r.webhook_id: r for r in session.scalars(select(RetryEntry).where(RetryEntry.webhook_id.in_(webhook_ids)))}


@pytest.mark.integration
def test_only_requests_that_left_spend_the_retry_budget(database, unique: str) -> None:
    """A hanging endpoint with one slot: one request leaves and is cut, the rest never
    leave before the deadline; an open circuit sends nothing. Only the one is an attempt."""
    async def hangs(request: web.Request) -> web.Response:
        await asyncio.sleep(60)
        return web.Response(status=200)

    store = PostgresDeliveryStore(database.engine)
    circuit = CircuitSettings(consecutive_failures=1, min_calls=1, window=10, cool_down_s=30)
    # Three attempts, as the endpoint had; each of these deliveries has made two.
    settings = StageSettings(deadline_s=DEADLINE_S, circuit=circuit,
                             policy=replace(DEFAULT_RETRY_POLICY, schedule=(timedelta(0),) * 3))
    hanging, open_circuit = f"ep_{unique}_hanging", f"ep_{unique}_open"
    process_breakers(circuit)[open_circuit].record_failure()
    with Receivers() as receivers:
        base = receivers.serve({"/hang": hangs})
        targets = {hanging: replace(target(hanging, f"{base}/hang"), limits=EndpointLimits(max_in_flight=1)),
                   open_circuit: target(open_circuit, f"{base}/hang")}
        pendings = [replace(single(unique, f"budget-{n}", endpoint), attempts=2)
                    for endpoint in (hanging, open_circuit) for n in range(4)]
        before = datetime.now(UTC)
        tally = run_stage(pendings, targets, store, loopback_transport, settings)
    entries = handed_over(database, [p.webhook_id for p in pendings])
    sent = [e for e in entries.values() if e.attempts == 3]
    assert len(sent) == 1 and sent[0].endpoint_id == hanging
    assert (sent[0].dead_reason, sent[0].last_error.split(":")[0]) == ("exhausted", "deadline")
    held = [e for e in entries.values() if e is not sent[0]]
    assert len(held) == 7 and {(e.attempts, e.dead_reason) for e in held} == {(2, None)}, \
        "not sent: attempt count kept, not dead-lettered"
    waiting_for_slot = [e for e in held if e.endpoint_id == hanging]
    assert all(e.due_at <= datetime.now(UTC) for e in waiting_for_slot), "due again at once"
    assert all(e.last_error.startswith("deadline: not sent") for e in waiting_for_slot)
    behind_circuit = [e for e in held if e.endpoint_id == open_circuit]
    assert all(before + timedelta(seconds=25) < e.due_at for e in behind_circuit), "due when the circuit lets one by"
    assert all(e.last_error.startswith("circuit_open") for e in behind_circuit)
    assert tally.total(Outcome.RETRIED) == 7 and tally.total(Outcome.DEAD_LETTERED) == 1

    log = attempt_log(database, [p.webhook_id for p in pendings])
    assert sorted((row.held_back, row.attempt) for row in log) == [(False, 3)] + [(True, 3)] * 7, \
        "every hold is shown, as the third attempt that was not made"


@pytest.mark.integration
def test_a_retry_after_pauses_the_whole_endpoint_on_every_path(database, unique: str) -> None:
    recorder = Recorder()

    async def busy_once(request: web.Request) -> web.Response:
        await recorder.record(request)
        if len(recorder.requests) == 1:
            return web.Response(status=429, headers={"Retry-After": "20"})
        return web.Response(status=204)

    store, queue = PostgresDeliveryStore(database.engine), RetryQueue(database.engine)
    endpoint = f"ep_{unique}_busy"
    with Receivers() as receivers:
        base = receivers.serve({"/busy": busy_once})
        targets = {endpoint: replace(target(endpoint, f"{base}/busy"), limits=EndpointLimits(max_in_flight=1))}
        first = [single(unique, f"pause-{n}", endpoint) for n in range(4)]
        before = datetime.now(UTC)
        run_stage(first, targets, store, loopback_transport, StageSettings(deadline_s=5))
        assert len(recorder.requests) == 1, "the three others waited for the pause, in the same stage"
        # Another worker, another micro-batch: it knows of the pause only through the store.
        assert set(store.screen((), (), {endpoint}).blocked.throttled) == {endpoint}
        second = [single(unique, f"pause-later-{n}", endpoint) for n in range(3)]
        run_stage(second, targets, store, loopback_transport, StageSettings(deadline_s=5))
        assert len(recorder.requests) == 1
        # The retry path: everything due now is left alone until the pause ends.
        ids = [p.webhook_id for p in first + second]
        with database.transaction() as session:
            session.execute(update(RetryEntry).where(RetryEntry.webhook_id.in_(ids))
                            .values(due_at=datetime.now(UTC) - timedelta(seconds=1)))
        claimed = [c for c in queue.claim(0, 1, 1000, timedelta(seconds=30), datetime.now(UTC))
                   if c.pending.endpoint_id == endpoint]
        assert claimed == [] and len(recorder.requests) == 1
    entries = handed_over(database, ids)
    assert entries[first[0].webhook_id].attempts == 1, "the refused request was an attempt"
    held = [entries[p.webhook_id] for p in first[1:] + second]
    assert {e.attempts for e in held} == {0}
    log = attempt_log(database, [p.webhook_id for p in first[1:] + second])
    assert len(log) == 6 and all(row.held_back and row.error.startswith("throttled: ") for row in log)
    with database.transaction() as session:
        until = session.get(EndpointHealth, endpoint).throttled_until
    assert before + timedelta(seconds=19) < until < datetime.now(UTC) + timedelta(seconds=21)


@pytest.mark.integration
def test_after_a_410_nothing_more_goes_to_the_subscription_in_this_stage(database, unique: str) -> None:
    recorder = Recorder()

    async def gone(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=410)

    store = PostgresDeliveryStore(database.engine)
    endpoint = f"ep_{unique}_gone1"
    with Receivers() as receivers:
        base = receivers.serve({"/gone": gone})
        targets = {endpoint: replace(target(endpoint, f"{base}/gone"), limits=EndpointLimits(max_in_flight=1))}
        pendings = [single(unique, f"gone-{n}", endpoint) for n in range(5)]
        tally = run_stage(pendings, targets, store, loopback_transport, StageSettings(deadline_s=5))
    assert len(recorder.requests) == 1
    assert tally.gone_subscriptions() == {pendings[0].subscription_id}
    entries = handed_over(database, [p.webhook_id for p in pendings])
    assert (entries[pendings[0].webhook_id].dead_reason, entries[pendings[0].webhook_id].attempts) == (GONE_REASON, 1)
    assert {(entries[p.webhook_id].attempts, entries[p.webhook_id].dead_reason) for p in pendings[1:]} == {(0, None)}
    with database.transaction() as session:
        assert session.get(GoneSubscription, pendings[0].subscription_id) is not None


@pytest.mark.integration
def test_outcomes_are_recorded_while_the_stage_is_still_sending(database, unique: str) -> None:
    """What a crash mid-stage would resend: only what was in flight, not what already came back."""
    release = threading.Event()

    async def ok(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def slow(request: web.Request) -> web.Response:
        while not release.is_set():
            await asyncio.sleep(0.05)
        return web.Response(status=204)

    store = PostgresDeliveryStore(database.engine)
    fast_endpoint, slow_endpoint = f"ep_{unique}_fast", f"ep_{unique}_slow"
    with Receivers() as receivers:
        base = receivers.serve({"/ok": ok, "/slow": slow})
        targets = {fast_endpoint: target(fast_endpoint, f"{base}/ok"),
                   slow_endpoint: target(slow_endpoint, f"{base}/slow")}
        fast = [single(unique, f"early-{n}", fast_endpoint) for n in range(20)]
        pendings = [*fast, single(unique, "late", slow_endpoint)]
        stage = threading.Thread(target=run_stage, args=(pendings, targets, store, loopback_transport,
                                                         StageSettings(deadline_s=20)))
        stage.start()
        try:
            wait_for(lambda: store.screen([p.webhook_id for p in fast], (), ()).settled == {p.webhook_id for p in fast},
                     "the answered deliveries to be recorded while one was in flight", 10, every_s=0.05)
            assert stage.is_alive(), "the stage ended first: its outcomes were recorded only at its end"
            assert store.screen([pendings[-1].webhook_id], (), ()).settled == set()
        finally:
            release.set()
            stage.join(30)
    assert store.screen([pendings[-1].webhook_id], (), ()).settled == {pendings[-1].webhook_id}


# -- the same stage on the in-memory transport and store: no servers, no database --------------


def test_a_stage_in_memory_skips_what_is_settled_defers_the_failing_and_records_the_rest() -> None:
    async def answer(request: Request) -> Result:
        if request.endpoint.id == "ep_hang":
            await asyncio.sleep(60)
        return Response({"ep_ok": 200, "ep_busy": 503}[request.endpoint.id], {}, b"", 0.001)

    transport, store = MemoryTransport(answer), MemoryStore()
    targets = {name: target(name, f"http://127.0.0.1:9/{name}") for name in ("ep_ok", "ep_busy", "ep_hang", "ep_down")}
    pendings = [single("mem", f"e-{name}", name) for name in targets]
    pendings.append(single("mem", "e-ep_ok", "ep_ok"))  # the same webhook id again
    settings = StageSettings(deadline_s=DEADLINE_S)

    tally = run_stage(pendings, targets, store, transport.factory(), settings, failing={"ep_down"})
    again = run_stage(pendings, targets, store, transport.factory(), settings)

    assert sorted(r.endpoint.id for r in transport.requests) == ["ep_busy", "ep_hang", "ep_ok"]
    assert Webhook(SECRET.text).verify(transport.requests[0].body, dict(transport.requests[0].headers))
    assert (tally.total(Outcome.DELIVERED), tally.total(Outcome.RETRIED), tally.total(Outcome.SKIPPED)) == (1, 3, 1)
    assert again.total(Outcome.SKIPPED) == len(pendings) and len(transport.requests) == 3
    kinds = {webhook_id(state): state for state in store.states.values()}
    by_endpoint = {p.endpoint_id: kinds[p.webhook_id] for p in pendings}
    assert by_endpoint["ep_hang"].outcome.kind == FailureKind.DEADLINE  # type: ignore[union-attr]
    assert by_endpoint["ep_down"].outcome.kind == FailureKind.DEFERRED  # type: ignore[union-attr]
    assert by_endpoint["ep_busy"].outcome.status == 503  # type: ignore[union-attr]


def test_on_settled_hears_every_kept_state_and_gone_subscriptions_are_dead_lettered_unsent() -> None:
    async def answer(request: Request) -> Result:
        return Response(200, {}, b"", 0.001)

    transport, store = MemoryTransport(answer), MemoryStore()
    targets = {name: target(name, f"http://127.0.0.1:9/{name}") for name in ("ep_a", "ep_b")}
    pendings = [single("hook", f"e-{name}", name) for name in targets]
    heard: list[State] = []

    tally = run_stage(pendings, targets, store, transport.factory(), StageSettings(deadline_s=DEADLINE_S),
                      gone={"sub_hook_ep_b"}, on_settled=heard.extend)

    assert [r.endpoint.id for r in transport.requests] == ["ep_a"]
    assert (tally.total(Outcome.DELIVERED), tally.total(Outcome.DEAD_LETTERED)) == (1, 1)
    # What the self-audit writes its outcomes from: each state the store kept, once.
    assert sorted(map(webhook_id, heard)) == sorted(store.states) == sorted(p.webhook_id for p in pendings)
    unsent = next(s for s in heard if webhook_id(s) == pendings[1].webhook_id)
    assert isinstance(unsent, DeadLettered) and unsent.reason == DeadLetterReason.REJECTED
