"""The delivery query end to end: events produced to the real broker, the registry in the
real PostgreSQL, deliveries received by real HTTP servers on 127.0.0.1.

One scenario runs once for the module (a Spark query is the expensive part), in three
acts, and the tests below each check one promise against what it recorded:

1. the query runs on a processing-time trigger; the events produced before it started
   make its first micro-batch: every subscription level with filters, signed requests
   with three kinds of endpoint auth, a hanging endpoint, one that answers 410, two
   batch-mode subscriptions on one endpoint (one fills batches, one waits for max_wait),
   binary-mode events, a duplicate and malformed records;
2. while it runs, a subscription is added and one disabled, and more events follow;
3. the job is stopped, its matching query's last commit deleted (a crash after the
   sends, before the commit), and the job started again on the same checkpoints: it
   replays that micro-batch.
"""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from sqlalchemy import select
from standardwebhooks import Webhook

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Received, Recorder
from tests.delivery.test_auth import CLIENT_ID, CLIENT_SECRET, TokenServer
from tests.waiting import wait_for
from wayline.core.envelope import Reason
from wayline.core.kafka import ensure_topics
from wayline.core.metrics import serve_metrics
from wayline.core.secret import Secret
from wayline.core.settings import DeliverySettings, Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.outcomes import BatchSummary, Outcome
from wayline.delivery.signing import batch_message_id, message_id
from wayline.delivery.storage.store import GONE_REASON, DeliveryLogEntry, RetryEntry
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import BasicAuth, BearerAuth, EndpointIn, EndpointService, NoAuth, OAuth2Auth, RotateIn
from wayline.registry.filter import evaluate, parse_filter
from wayline.registry.models import Subscription

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PREFIX = "events.dlv."
TOPICS = (f"{PREFIX}orders", f"{PREFIX}other")
X, Y, Z, W = "dlv.order.created", "dlv.order.paid", "dlv.order.shipped", "dlv.order.unwatched"
TENANTS = (("dl-a", None), ("dl-a", "d-1"), ("dl-a", "d-2"), ("dl-b", None), ("dl-c", None), ("dl-d", None))
DEADLINE_S = 2.0
BASIC = ("wayline", "pa55word")
BEARER = "bearer-token-1"
MALFORMED = (Reason.NOT_JSON, Reason.MISSING_TENANT, Reason.OVERSIZE)


# ---- what the registry holds and what each endpoint should receive -----------------------------

@dataclass(frozen=True)
class Sub:
    """A subscription as the test defines it, and its meaning written out plainly."""

    endpoint: str
    types: frozenset[str]
    tenants: frozenset[str] | None = None  # level b
    subtenants: frozenset[tuple[str, str]] | None = None  # level c
    filter: dict[str, Any] | None = None
    mode: subscription.Mode = "streaming"
    max_count: int | None = None
    max_wait_ms: int | None = None

    def wants(self, event: dict[str, Any]) -> bool:
        in_scope = event["type"] in self.types and (
            (self.tenants is None and self.subtenants is None)
            or (self.tenants is not None and event["tenantid"] in self.tenants)
            or (self.subtenants is not None and (event["tenantid"], event.get("subtenantid")) in self.subtenants)
        )
        return in_scope and (self.filter is None or evaluate(parse_filter(self.filter), event))

    def body(self, endpoint_id: str) -> subscription.SubscriptionIn:
        scope: subscription.Scope = (
            "all" if self.tenants is None and self.subtenants is None else "tenants" if self.tenants else "subtenants"
        )
        return subscription.SubscriptionIn(
            endpoint_id=endpoint_id, event_types=sorted(self.types), tenant_scope=scope,
            tenants=sorted(self.tenants or ()), subtenants=sorted(self.subtenants or ()), filter=self.filter,
            mode=self.mode, max_count=self.max_count, max_wait_ms=self.max_wait_ms,
        )


SUBS = {
    "all": Sub("basic", frozenset({X}), filter={"data.amount": {"$gte": 100}}),
    "one-department": Sub("basic", frozenset({X}), subtenants=frozenset({("dl-a", "d-1")})),
    "two-tenants": Sub("bearer", frozenset({X, Y}), tenants=frozenset({"dl-a", "dl-b"})),
    "department-filtered": Sub("oauth", frozenset({Y}), subtenants=frozenset({("dl-a", "d-2")}),
                               filter={"data.amount": {"$lt": 100}}),
    "hangs": Sub("hang", frozenset({Y})),
    "gone": Sub("gone", frozenset({X}), tenants=frozenset({"dl-c"})),
    # 13 distinct X events in act 1: three full batches at once, the 13th after max_wait.
    "batched": Sub("batch", frozenset({X}), mode="batch", max_count=4, max_wait_ms=1000),
    # 2 Y events of dl-b in act 1: one batch of two after max_wait.
    "batched-slow": Sub("batch", frozenset({Y}), tenants=frozenset({"dl-b"}), mode="batch", max_count=100,
                        max_wait_ms=1500),
}
BATCHED = ("batched", "batched-slow")
ADDED = ("shipped", Sub("bearer", frozenset({Z})))  # act 2
DISABLED = "hangs"  # act 2


def event(event_id: str, event_type: str, tenant: str, subtenant: str | None, amount: int) -> dict[str, Any]:
    body: dict[str, Any] = {"specversion": "1.0", "id": event_id, "source": "/dlv", "type": event_type,
                            "tenantid": tenant, "data": {"amount": amount}}
    if subtenant is not None:
        body["subtenantid"] = subtenant
    return body


@dataclass(frozen=True)
class KafkaRecord:
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    event: dict[str, Any] | None = None
    """The event the receivers should see (None for malformed records)."""


def structured(e: dict[str, Any]) -> KafkaRecord:
    return KafkaRecord(orjson.dumps(e), (), e)


def binary(e: dict[str, Any], extra: tuple[tuple[str, bytes], ...] = ()) -> KafkaRecord:
    headers = tuple((f"ce_{k}", str(v).encode()) for k, v in e.items() if k != "data") + extra
    return KafkaRecord(orjson.dumps(e["data"]), headers, e)


def act_one() -> list[KafkaRecord]:
    events = [event(f"p1-{n}", t, tenant, sub, amount)
              for n, (t, (tenant, sub), amount) in enumerate(
                  (t, ts, a) for t in (X, Y) for ts in TENANTS for a in (50, 150))]
    records = [structured(e) for e in events]
    records.append(structured(events[7]))  # the same event twice on Kafka: one delivery per subscription
    records.append(structured(event("p1-unwatched", W, "dl-a", None, 1)))
    records += [
        binary(event("p1-bin-1", X, "dl-b", None, 150), extra=(("ce_traceparent", b"00-abc-01"),)),
        # A repeated attribute header: the first wins, as in the parser.
        binary(event("p1-bin-2", Y, "dl-a", "d-2", 20), extra=(("ce_source", b"/ignored"),)),
    ]
    records += [
        KafkaRecord(b"<html>not an event</html>"),
        KafkaRecord(orjson.dumps({k: v for k, v in event("p1-bad", X, "dl-a", None, 1).items() if k != "tenantid"})),
        KafkaRecord(orjson.dumps(event("p1-big", X, "dl-a", None, 150) | {"data": {"blob": "x" * 2048}})),
    ]
    return records


def act_two() -> list[KafkaRecord]:
    return [structured(event(f"p2-{n}", Z, tenant, None, 10)) for n, tenant in enumerate(("dl-a", "dl-b", "dl-c"))] + [
        structured(event("p2-x", X, "dl-c", None, 500)),  # "all" gets it, "gone" is disabled by now
        structured(event("p2-y", Y, "dl-b", None, 5)),  # "two-tenants" gets it, "hangs" is disabled
    ]


def expected(records: list[KafkaRecord], subs: dict[str, Sub], ids: dict[str, str]) -> dict[str, set[str]]:
    """Webhook ids per endpoint."""
    wanted: dict[str, set[str]] = {}
    for record in records:
        if record.event is None:
            continue
        for name, sub in subs.items():
            if sub.mode == "streaming" and sub.wants(record.event):
                wanted.setdefault(sub.endpoint, set()).add(message_id(record.event["id"], ids[name]))
    return wanted


def expected_batched(records: list[KafkaRecord], subs: dict[str, Sub]) -> dict[str, set[str]]:
    """Event ids per batch-mode subscription."""
    return {
        name: {r.event["id"] for r in records if r.event is not None and sub.wants(r.event)}
        for name, sub in subs.items() if sub.mode == "batch"
    }


def produce(bootstrap: str, records: list[KafkaRecord]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, record in enumerate(records):
        producer.produce(TOPICS[n % 2], record.value, headers=list(record.headers))
    assert producer.flush(30) == 0


# ---- the scenario -------------------------------------------------------------------------------

@dataclass
class Scenario:
    recorder: Recorder
    secrets: dict[str, list[Secret]]
    endpoint_ids: dict[str, str]
    subscription_ids: dict[str, str]
    acts: dict[int, list[KafkaRecord]]
    received: dict[int, list[Received]] = field(default_factory=dict)
    """Every request received by the end of each act."""
    totals: dict[int, BatchSummary] = field(default_factory=dict)
    scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    retry_rows: list[RetryEntry] = field(default_factory=list)
    log_ids: set[str] = field(default_factory=set)
    still_enabled: dict[str, bool] = field(default_factory=dict)
    replayed_rows: int = 0

    def on(self, endpoint: str, act: int = 3) -> list[Received]:
        return [r for r in self.received[act] if r.path == f"/{endpoint}"]

    def subs(self, act: int) -> dict[str, Sub]:
        if act == 1:
            return dict(SUBS)
        return {name: sub for name, sub in SUBS.items() if name not in (DISABLED, "gone")} | dict([ADDED])

    def wanted(self, act: int) -> dict[str, set[str]]:
        return expected(self.acts[act], self.subs(act), self.subscription_ids)

    def batched(self, act: int) -> dict[str, set[str]]:
        return expected_batched(self.acts[act], self.subs(act))

    def batches(self, requests: list[Received] | None = None) -> list[tuple[str, list[dict[str, Any]], Received]]:
        """Each batch request (by the end, or among ``requests``): the subscription its
        webhook id names, its events, the request."""
        received = [r for r in (self.received[3] if requests is None else requests) if r.path == "/batch"]
        named = []
        for request in received:
            events = orjson.loads(request.body)
            for name in BATCHED:
                if request.headers["webhook-id"] == batch_message_id(self.subscription_ids[name],
                                                                      [e["id"] for e in events]):
                    named.append((name, events, request))
        assert len(named) == len(received), "every batch's id names one subscription and its events"
        return named

    def batched_arrived(self, act: int) -> bool:
        got: dict[str, set[str]] = {name: set() for name in BATCHED}
        for name, events, _ in self.batches(list(self.recorder.requests)):
            got[name] |= {e["id"] for e in events}
        return all(got[name] >= ids for name, ids in self.batched(act).items())


def rows_seen(metrics: DeliveryMetrics) -> int:
    seen = metrics.overview()
    return seen.events + seen.quarantined


@pytest.fixture(scope="module")
def scenario(api_settings: Settings, database, spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    from wayline.pipelines.delivery import start_delivery

    settings = api_settings.model_copy(update={
        # Its own alert topics too: act 1 counts every record the job reads.
        "kafka": api_settings.kafka.model_copy(update={"event_topic_prefix": PREFIX, "alert_topic_prefix": "alerts.dlv."}),
        # One sending task: the hanging endpoint shares it (and its event loop) with the fast
        # ones, so keeping them apart is the dispatcher's job. The replay uses two tasks.
        "delivery": DeliverySettings(stage_deadline_s=DEADLINE_S, version_poll_s=0.5, trigger_interval_s=0.5,
                                     send_partitions=1, batch_shards=1),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, TOPICS, 2)
    checkpoint = tmp_path_factory.mktemp("delivery") / "checkpoint"
    endpoints = EndpointService.from_settings(settings)
    recorder = Recorder()
    tokens = TokenServer()

    async def ok(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    async def hangs(request: web.Request) -> web.Response:
        await recorder.record(request)
        await asyncio.sleep(60)
        return web.Response(status=200)

    async def gone(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=410, text="this hook was removed")

    with Receivers() as receivers:
        base = receivers.serve({"/basic": ok, "/bearer": ok, "/oauth": ok, "/batch": ok, "/hang": hangs,
                                "/gone": gone, "/token": tokens.token})
        auths: dict[str, BasicAuth | BearerAuth | OAuth2Auth] = {
            "basic": BasicAuth(kind="basic", username=BASIC[0], password=SecretStr(BASIC[1])),
            "bearer": BearerAuth(kind="bearer", token=SecretStr(BEARER)),
            "oauth": OAuth2Auth(kind="oauth2", token_url=f"{base}/token", client_id=CLIENT_ID,
                                client_secret=SecretStr(CLIENT_SECRET), scope="events:write"),
        }
        secrets: dict[str, list[Secret]] = {}
        endpoint_ids: dict[str, str] = {}
        subscription_ids: dict[str, str] = {}
        with database.transaction() as s:
            catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id="dl-a", subtenants=["d-1", "d-2"])]
                                   + [catalog.TenantIn(id=t) for t in ("dl-b", "dl-c", "dl-d")])
            for name in (X, Y, Z, W):
                catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=name))
            owner = customer.create(s, ADMIN, customer.CustomerIn(name="Delivery Co"))
            for name in ("basic", "bearer", "oauth", "hang", "gone", "batch"):
                secret = Secret.generate()
                created = endpoints.create(s, ADMIN, EndpointIn(
                    url=f"{base}/{name}", customer_id=owner.id, secret=secret.text, auth=auths.get(name, NoAuth()),
                ))
                endpoint_ids[name], secrets[name] = created.id, [secret]
            # Mid-rotation: two secrets sign, and each must verify on its own.
            rotated = endpoints.rotate(s, ADMIN, endpoint_ids["basic"], RotateIn())
            secrets["basic"] = [Secret.parse(r.secret) for r in rotated]
            for name, sub in SUBS.items():
                subscription_ids[name] = subscription.create(s, ADMIN, sub.body(endpoint_ids[sub.endpoint])).id

        acts = {1: act_one(), 2: act_two(), 3: []}
        record = Scenario(recorder, secrets, endpoint_ids, subscription_ids, acts)
        produce(bootstrap, acts[1])

        # Act 1: the first micro-batch holds every record produced so far.
        metrics = DeliveryMetrics()
        server = serve_metrics(metrics, "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
        job = start_delivery(spark, settings, database, endpoints, metrics, checkpoint=checkpoint)
        try:
            wait_for(lambda: (rows_seen(metrics) == len(acts[1]) and record.batched_arrived(1)) or not job.isActive,
                     "act 1")
            record.received[1] = list(recorder.requests)
            record.totals[1] = metrics.totals()

            # Act 2: the registry changes under the running query.
            with database.transaction() as s:
                subscription_ids[ADDED[0]] = subscription.create(
                    s, ADMIN, ADDED[1].body(endpoint_ids[ADDED[1].endpoint])).id
                subscription.update(s, ADMIN, subscription_ids[DISABLED], subscription.SubscriptionPatch(enabled=False))
            # The change applies within a version poll; act 2's events follow once it has.
            wait_for(lambda: job.registry_version == database.current_version(), "the new registry version")
            produce(bootstrap, acts[2])
            wait_for(lambda: (rows_seen(metrics) == len(acts[1]) + len(acts[2]) and record.batched_arrived(2))
                     or not job.isActive, "act 2")
            record.received[2] = list(recorder.requests)
            record.totals[2] = metrics.totals()
            text = urllib.request.urlopen(server.url, timeout=10).read().decode()
            record.scraped = {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(text) for sample in family.samples
            }
            assert job.isActive and job.exception() is None, job.exception()
        finally:
            job.stop()
            server.close()

        # Act 3: as if the job crashed after its last micro-batch's sends, before the commit.
        commits = checkpoint / "matching" / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
        replay_metrics = DeliveryMetrics()
        two_tasks = settings.model_copy(update={"delivery": settings.delivery.model_copy(update={"send_partitions": 2})})
        replay = start_delivery(spark, two_tasks, database, endpoints, replay_metrics, checkpoint=checkpoint,
                                available_now=True)
        try:
            replay.await_termination(120)
            assert replay.exception() is None, replay.exception()
        finally:
            replay.stop()
        record.replayed_rows = sum(p.numInputRows for p in replay.matching.recentProgress)
        record.received[3] = list(recorder.requests)
        record.totals[3] = replay_metrics.totals()

        with database.transaction() as s:
            ours = list(endpoint_ids.values())
            record.retry_rows = list(s.scalars(select(RetryEntry).where(RetryEntry.endpoint_id.in_(ours))))
            record.log_ids = set(s.scalars(
                select(DeliveryLogEntry.webhook_id).where(DeliveryLogEntry.endpoint_id.in_(ours))))
            record.still_enabled = {
                name: s.get(Subscription, sub_id).enabled for name, sub_id in subscription_ids.items()
            }
        yield record


# ---- the promises -------------------------------------------------------------------------------

FAST = ("basic", "bearer", "oauth")


def ids_of(requests: list[Received]) -> list[str]:
    return [r.headers["webhook-id"] for r in requests]


def test_each_endpoint_receives_exactly_its_events_once(scenario: Scenario) -> None:
    for endpoint in FAST:
        wanted = scenario.wanted(1).get(endpoint, set()) | scenario.wanted(2).get(endpoint, set())
        got = ids_of(scenario.on(endpoint))
        assert Counter(got) == Counter(wanted), endpoint
    assert scenario.log_ids == {i for e in FAST for act in (1, 2) for i in scenario.wanted(act).get(e, set())} | {
        request.headers["webhook-id"] for _, _, request in scenario.batches()}


def test_batches_hold_each_event_once_and_never_mix_subscriptions(scenario: Scenario) -> None:
    by_id = {r.event["id"]: r for act in (1, 2) for r in scenario.acts[act] if r.event is not None}
    for name in BATCHED:
        got = Counter(e["id"] for sub, events, _ in scenario.batches() if sub == name for e in events)
        assert got == Counter(scenario.batched(1)[name] | scenario.batched(2)[name]), name
    for name, events, request in scenario.batches():
        assert all(SUBS[name].wants(by_id[e["id"]].event) for e in events)
        assert events == [as_sent(by_id[e["id"]]) for e in events], "each item is the structured CloudEvent"
        assert request.headers["content-type"] == "application/cloudevents-batch+json"
        Webhook(scenario.secrets["batch"][0].text).verify(request.body, request.headers)


def test_a_batch_goes_out_when_full_or_after_max_wait(scenario: Scenario) -> None:
    first = [(name, events, r) for name, events, r in scenario.batches(scenario.received[1])]
    full = [r for name, events, r in first if name == "batched" and len(events) == 4]
    rest = [(name, len(events), r) for name, events, r in first if len(events) < SUBS[name].max_count]
    assert len(full) == 3, "13 events, max_count 4: three full batches"
    assert sorted((name, size) for name, size, _ in rest) == [("batched", 1), ("batched-slow", 2)]
    sent_at = min(r.at for r in full)
    for name, _, request in rest:
        waited = request.at - sent_at
        # The wait starts when the batching query takes the leftovers, just after the full batches went out.
        assert SUBS[name].max_wait_ms / 1000 - 0.5 < waited < SUBS[name].max_wait_ms / 1000 + 10, (name, waited)


def test_every_request_is_signed_by_every_active_secret_and_authenticated(scenario: Scenario) -> None:
    assert len(scenario.secrets["basic"]) == 2
    oauth_tokens = set()
    for endpoint in FAST:
        for request in scenario.on(endpoint):
            for secret in scenario.secrets[endpoint]:
                Webhook(secret.text).verify(request.body, request.headers)
            assert request.headers["content-type"] == "application/cloudevents+json"
            if endpoint == "oauth":
                oauth_tokens.add(request.headers["authorization"])
            elif endpoint == "basic":
                assert request.headers["authorization"] == "Basic " + base64.b64encode(":".join(BASIC).encode()).decode()
            elif endpoint == "bearer":
                assert request.headers["authorization"] == f"Bearer {BEARER}"
    assert oauth_tokens and all(t.startswith("Bearer tok-") for t in oauth_tokens)


def as_sent(record: KafkaRecord) -> dict[str, Any]:
    """The structured CloudEvent an endpoint should get for a record: the value itself, or
    for binary mode every ``ce_`` attribute (first of a repeat, as text) and the data."""
    assert record.event is not None
    if not record.headers:
        return orjson.loads(record.value)
    attributes = {k: str(v) for k, v in record.event.items() if k != "data"}
    extensions = {"traceparent": "00-abc-01"} if record.event["id"] == "p1-bin-1" else {}
    return {**attributes, **extensions, "data": record.event["data"]}


def test_bodies_are_the_structured_cloudevents(scenario: Scenario) -> None:
    sent = {}
    for act in (1, 2):
        for record in scenario.acts[act]:
            for name, sub in (SUBS | dict([ADDED])).items():
                if record.event is not None and sub.wants(record.event):
                    sent[message_id(record.event["id"], scenario.subscription_ids[name])] = record
    checked_binary = 0
    for endpoint in FAST:
        for request in scenario.on(endpoint):
            record = sent[request.headers["webhook-id"]]
            assert record.event is not None
            if not record.headers:
                assert request.body == record.value, "structured events go out byte for byte"
                continue
            checked_binary += 1
            assert orjson.loads(request.body) == as_sent(record)
    assert checked_binary == 4  # each binary event reaches two of the fast endpoints


def test_a_hanging_endpoint_holds_up_no_one_and_waits_in_the_retry_store(scenario: Scenario) -> None:
    fast_in_act_one = [r for e in FAST for r in scenario.on(e, act=1)]
    assert Counter(ids_of(fast_in_act_one)) == Counter(i for e in FAST for i in scenario.wanted(1).get(e, set()))
    hung = scenario.on("hang", act=1)
    assert hung, "the hanging endpoint was called"
    # The fast endpoints were served while the hanging one held its requests, not after the deadline.
    assert max(r.at for r in fast_in_act_one) < min(r.at for r in hung) + DEADLINE_S / 2

    waiting = [r for r in scenario.retry_rows if r.endpoint_id == scenario.endpoint_ids["hang"]]
    assert {r.webhook_id for r in waiting} == scenario.wanted(1)["hang"]
    for row in waiting:
        assert (row.kind, row.attempts, row.dead_reason) == ("single", 1, None)
        assert row.last_error.startswith("deadline: ")
        assert row.due_at >= row.created_at + timedelta(seconds=3), "the schedule's second attempt comes later"
        assert orjson.loads(row.payload)["type"] == Y and row.event_ids == [orjson.loads(row.payload)["id"]]


def test_a_410_disables_the_subscription_and_hands_the_message_over(scenario: Scenario) -> None:
    handed = [r for r in scenario.retry_rows if r.endpoint_id == scenario.endpoint_ids["gone"]]
    assert {r.webhook_id for r in handed} == scenario.wanted(1)["gone"]
    assert all(r.dead_reason == GONE_REASON and r.last_error == "HTTP 410: this hook was removed" for r in handed)
    assert scenario.still_enabled["gone"] is False
    assert len(scenario.on("gone")) == len(scenario.on("gone", act=1)), "a disabled subscription gets nothing more"


def test_registry_changes_apply_to_the_running_query(scenario: Scenario) -> None:
    assert scenario.totals[2].registry_version > scenario.totals[1].registry_version
    added = scenario.wanted(2)["bearer"] & {
        message_id(r.event["id"], scenario.subscription_ids[ADDED[0]]) for r in scenario.acts[2] if r.event}
    assert added and added <= set(ids_of(scenario.on("bearer", act=2)))
    assert len(scenario.on("hang")) == len(scenario.on("hang", act=1)), "the disabled subscription stopped"


def test_a_replayed_micro_batch_sends_nothing_already_settled(scenario: Scenario) -> None:
    replay = scenario.totals[3]
    assert scenario.replayed_rows > 0
    assert replay.deliveries.total(Outcome.DELIVERED) == 0
    assert replay.deliveries.total(Outcome.SKIPPED) > 0
    assert len(scenario.received[3]) == len(scenario.received[2])


def test_malformed_records_are_quarantined_and_unmatched_events_counted(scenario: Scenario) -> None:
    first = scenario.totals[1]
    assert first.quarantined == Counter({reason.value: 1 for reason in MALFORMED})
    assert first.filtered == 1
    assert first.held == 1 + 2, "the 13th event of 'batched' and both of 'batched-slow' waited"


def test_metrics_are_served_per_endpoint_and_subscription(scenario: Scenario) -> None:
    def sample(name: str, **labels: str) -> float:
        return scenario.scraped[(name, tuple(sorted(labels.items())))]

    basic, everything = scenario.endpoint_ids["basic"], scenario.subscription_ids["all"]
    delivered = sum(1 for i in ids_of(scenario.on("basic", act=2))
                    if i in {message_id(r.event["id"], everything) for a in (1, 2) for r in scenario.acts[a] if r.event})
    assert sample("wayline_deliveries_total", endpoint=basic, subscription=everything, outcome="delivered") == delivered
    assert sample("wayline_delivery_latency_seconds_count", endpoint=basic) == len(scenario.on("basic", act=2))
    hang = scenario.endpoint_ids["hang"]
    assert sample("wayline_delivery_failures_total", endpoint=hang, reason="deadline") == len(scenario.wanted(1)["hang"])
    assert sample("wayline_events_filtered_total") == 1
    assert sample("wayline_events_quarantined_total", reason="oversize") == 1
