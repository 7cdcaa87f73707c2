"""The compiled snapshot matches exactly the envelopes each subscription level should get,
in Python and in Spark on a stream produced to the real broker."""

from __future__ import annotations

import itertools
from datetime import timedelta

import orjson
import pytest

from wayline.core.errors import Forbidden, RejectedInput
from wayline.core.kafka import ensure_topics
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN, Caller
from wayline.registry.endpoint import EndpointIn, EndpointPatch, EndpointService
from wayline.registry.filter import evaluate, parse_filter
from wayline.registry.secrets import SecretBox
from wayline.registry.snapshot import load_snapshot
from wayline.stack.loadgen import Record, produce

pytestmark = pytest.mark.integration

TENANTS = ("t-a", "t-b", "t-c", "t-d")
SUBTENANTS = (None, "d-1", "d-2")
RICH = {"data.amount": {"$gte": 100}}


@pytest.fixture(scope="module")
def endpoints(api_settings) -> EndpointService:
    return EndpointService(SecretBox.from_settings(api_settings), ["127.0.0.1/32"], timedelta(hours=1))


@pytest.fixture(scope="module")
def registry(database, endpoints):
    """Subscriptions of every level over event types only this module uses."""
    x, y, z = "snap.order.created", "snap.order.paid", "snap.order.void"
    with database.transaction() as s:
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id="t-a", subtenants=["d-1", "d-2"]),
                                          catalog.TenantIn(id="t-b"), catalog.TenantIn(id="t-c"), catalog.TenantIn(id="t-d")])
        for name in (x, y, z):
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=name))
        owner = customer.create(s, ADMIN, customer.CustomerIn(name="Snapshot Co"))
        ep = endpoints.create(s, ADMIN, EndpointIn(url="http://127.0.0.1:9/a", customer_id=owner.id))
        off = endpoints.create(s, ADMIN, EndpointIn(url="http://127.0.0.1:9/b", customer_id=owner.id))
        endpoints.update(s, ADMIN, off.id, EndpointPatch(enabled=False))

        def sub(endpoint_id=ep.id, **fields):
            return subscription.create(s, ADMIN, subscription.SubscriptionIn(endpoint_id=endpoint_id, **fields)).id

        defined = {
            sub(event_types=[x]): ("all", {x}, None, None),
            sub(event_types=[x, y], tenant_scope="tenants", tenants=["t-a", "t-b"], mode="batch"):
                ("tenants", {x, y}, {"t-a", "t-b"}, None),
            sub(event_types=[x], tenant_scope="subtenants", subtenants=[("t-a", "d-1")]):
                ("subtenants", {x}, {("t-a", "d-1")}, None),
            sub(event_types=[x], tenant_scope="tenants", tenants=["t-c"], filter=RICH):
                ("tenants", {x}, {"t-c"}, RICH),
            sub(event_types=[y], filter=RICH): ("all", {y}, None, RICH),
        }
        never = [sub(event_types=[x], enabled=False), sub(endpoint_id=off.id, event_types=[x])]
    with database.transaction() as s:
        snapshot = load_snapshot(s, endpoints)
    return snapshot, defined, never, (x, y, z)


def envelopes(types):
    for n, (event_type, tenant, sub, amount) in enumerate(itertools.product(types, TENANTS, SUBTENANTS, (50, 150))):
        yield {"id": f"e{n}", "type": event_type, "source": "/snap", "tenantid": tenant, "subtenantid": sub,
               "specversion": "1.0", "data": {"amount": amount}}


def expected_pairs(defined, types) -> set[tuple[str, str]]:
    """The levels' meaning written out plainly, independent of the snapshot's index."""
    pairs = set()
    for env in envelopes(types):
        for sub_id, (scope, sub_types, targets, raw_filter) in defined.items():
            in_scope = env["type"] in sub_types and (
                scope == "all"
                or (scope == "tenants" and env["tenantid"] in targets)
                or (scope == "subtenants" and (env["tenantid"], env["subtenantid"]) in targets)
            )
            if in_scope and (raw_filter is None or evaluate(parse_filter(raw_filter), env)):
                pairs.add((env["id"], sub_id))
    return pairs


def test_the_snapshot_index_matches_each_level_exactly(registry) -> None:
    snapshot, defined, never, types = registry
    got = set()
    for env in envelopes(types):
        for sub_id in snapshot.match(env["type"], env["tenantid"], env["subtenantid"]):
            compiled = snapshot.subscriptions[sub_id]
            if compiled.filter is None or evaluate(compiled.filter, env):
                got.add((env["id"], sub_id))
    assert got == expected_pairs(defined, types)
    assert not set(never) & set(snapshot.subscriptions)
    assert snapshot.subscriptions[next(iter(defined))].mode == "streaming"
    equal_filters = {c.filter_id for c in snapshot.subscriptions.values() if c.id in defined and c.filter}
    assert len(equal_filters) == 1  # the same filter text is compiled once


def test_spark_matches_a_produced_stream_exactly(registry, settings, spark, unique, tmp_path) -> None:
    from wayline.delivery.routing_table import publish
    from wayline.pipelines.envelope import parse_events, valid_events
    from wayline.pipelines.matching import match_events, routing

    snapshot, defined, _, types = registry
    topic = f"events.snapshot.{unique}"
    ensure_topics(settings.kafka_bootstrap(), [topic], 2)
    records = [Record(topic, env["tenantid"].encode(), orjson.dumps({k: v for k, v in env.items() if v is not None}))
               for env in envelopes(types)]
    produce(settings.kafka_bootstrap(), iter(records))

    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap())
           .option("subscribe", topic).option("includeHeaders", "true").load())
    events = valid_events(parse_events(raw, settings.envelope))
    publish(tmp_path, snapshot)
    pairs = match_events(events, routing(tmp_path)).select("id", "subscription_id")
    assert {(r["id"], r["subscription_id"]) for r in pairs.collect()} == expected_pairs(defined, types)


def test_version_moves_with_every_change_and_is_cheap_to_read(database, endpoints, registry) -> None:
    snapshot = registry[0]
    assert database.current_version() >= snapshot.version
    before = database.current_version()
    with database.transaction() as s:
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id="t-version")])
    after = database.current_version()
    assert after > before
    with database.transaction() as s:
        assert load_snapshot(s, endpoints).version == after


def test_operational_events_reach_their_own_customers_subscriptions_only(database, endpoints, unique) -> None:
    with database.transaction() as s:
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=f"ops-{unique}")])
        catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=f"ops.{unique}"))
        mine, theirs = (customer.create(s, ADMIN, customer.CustomerIn(name=f"Ops {n}", tenants=[f"ops-{unique}"]))
                        for n in (1, 2))
        subscribed = {}
        for owner in (mine, theirs):
            key = Caller(key_id=f"key_{owner.id}", customer_id=owner.id)
            hook = endpoints.create(s, key, EndpointIn(url="http://127.0.0.1:9/ops"))
            # A customer's own key may take scope 'all' for these types: it means its own events.
            subscribed[owner.id] = subscription.create(s, key, subscription.SubscriptionIn(
                endpoint_id=hook.id, event_types=sorted(catalog.OPERATIONAL_EVENT_TYPES))).id
            with pytest.raises(RejectedInput, match="cannot share a subscription with other event types"):
                subscription.create(s, key, subscription.SubscriptionIn(
                    endpoint_id=hook.id, event_types=[catalog.ENDPOINT_DISABLED, f"ops.{unique}"],
                    tenant_scope="tenants", tenants=[f"ops-{unique}"]))
            with pytest.raises(RejectedInput, match="use 'all'"):
                subscription.create(s, key, subscription.SubscriptionIn(
                    endpoint_id=hook.id, event_types=[catalog.ENDPOINT_DISABLED], tenant_scope="tenants",
                    tenants=[f"ops-{unique}"]))
            with pytest.raises(Forbidden, match="needs an admin key"):
                subscription.create(s, key, subscription.SubscriptionIn(endpoint_id=hook.id,
                                                                        event_types=[f"ops.{unique}"]))
    with database.transaction() as s:
        snapshot = load_snapshot(s, endpoints)
    for event_type in catalog.OPERATIONAL_EVENT_TYPES:
        assert subscribed[mine.id] in snapshot.match(event_type, mine.id, None)
        assert subscribed[theirs.id] not in snapshot.match(event_type, mine.id, None)
        assert subscribed[theirs.id] in snapshot.match(event_type, theirs.id, None)
