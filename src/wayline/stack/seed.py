"""A sample registry for the demo and the benchmarks: customers, endpoints, subscriptions.

Every subscription level and both delivery modes, against the load generator's catalog
(`wayline.stack.loadgen`), with endpoints on one local receiver (a path each). Seeding
replaces whatever an earlier seed left (customers are recognised by name), so each run
points the endpoints at this run's receiver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr
from sqlalchemy import select

from wayline.core.secret import Secret
from wayline.registry import catalog, customer, subscription
from wayline.registry.access import ADMIN
from wayline.registry.db import Database
from wayline.registry.endpoint import BasicAuth, BearerAuth, EndpointIn, EndpointService, NoAuth
from wayline.registry.models import Customer, EventType
from wayline.stack import loadgen

DEMO_PREFIX = "demo: "
HOT_TENANTS = 5  # the load generator's traffic is skewed toward the lowest tenant numbers


@dataclass(frozen=True)
class SeedEndpoint:
    """One endpoint of the sample: who owns it, what it subscribes to, how it is reached."""

    path: str
    owner: str
    auth: Any
    subscriptions: tuple[subscription.SubscriptionIn, ...]


@dataclass(frozen=True)
class Seeded:
    secrets: dict[str, list[str]]
    """Signing secrets per receiver path."""
    subscriptions: dict[str, str]
    """Subscription id → a sentence saying what it is."""


def _types(domain: str, entity: str | None = None) -> list[str]:
    return [t.name for t in loadgen.catalog() if t.name.split(".")[2] == domain
            and (entity is None or t.name.split(".")[3] == entity)]


def demo_endpoints() -> list[SeedEndpoint]:
    """The demo's shape: each subscription level, both modes, filters and three kinds of auth."""
    hot = [loadgen.tenant_id(i) for i in range(HOT_TENANTS)]
    departments = [(loadgen.tenant_id(0), d) for d in loadgen.subtenants_of(0)[:2]]

    def sub(types: list[str], **shape: Any) -> subscription.SubscriptionIn:
        return subscription.SubscriptionIn(endpoint_id="", event_types=types, **shape)

    return [
        SeedEndpoint("/acme/invoices", "Acme", BearerAuth(kind="bearer", token=SecretStr("demo-token")), (
            sub(_types("billing", "invoice")),  # a) every tenant
        )),
        SeedEndpoint("/acme/orders", "Acme", NoAuth(), (
            sub(_types("orders"), tenant_scope="tenants", tenants=hot, mode="batch", max_count=100, max_wait_ms=1000),
        )),
        SeedEndpoint("/globex/departments", "Globex",
                     BasicAuth(kind="basic", username="globex", password=SecretStr("demo-password")), (
            sub(_types("crm"), tenant_scope="subtenants", subtenants=departments),  # c) sub-tenants
        )),
        SeedEndpoint("/globex/big-payments", "Globex", NoAuth(), (
            sub(_types("payments"), filter={"$and": [{"data.amount": {"$gte": 900}},
                                                     {"data.currency": {"$in": ["EUR", "USD"]}}]}),
        )),
        SeedEndpoint("/initech/firehose", "Initech", NoAuth(), (
            sub(_types("analytics") + _types("audit"), mode="batch", max_count=500, max_wait_ms=1000),
        )),
    ]


def seed(database: Database, endpoints: EndpointService, receiver_url: str,
         shape: list[SeedEndpoint] | None = None) -> Seeded:
    """Replace the sample registry: every endpoint at ``receiver_url`` + its path."""
    shape = demo_endpoints() if shape is None else shape
    secrets: dict[str, list[str]] = {}
    described: dict[str, str] = {}
    with database.transaction() as session:
        for row in session.scalars(select(Customer).where(Customer.name.startswith(DEMO_PREFIX))):
            customer.delete(session, ADMIN, row.id)
        catalog.upsert_tenants(session, ADMIN, [
            catalog.TenantIn(id=loadgen.tenant_id(i), subtenants=list(loadgen.subtenants_of(i)))
            for i in range(HOT_TENANTS)
        ])
        wanted = {t for e in shape for s in e.subscriptions for t in s.event_types}
        for name in sorted(wanted - set(session.scalars(select(EventType.name)))):
            catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=name))
        owners: dict[str, str] = {}
        for endpoint in shape:
            if endpoint.owner not in owners:
                owners[endpoint.owner] = customer.create(session, ADMIN, customer.CustomerIn(
                    name=DEMO_PREFIX + endpoint.owner, tenants=[loadgen.tenant_id(i) for i in range(HOT_TENANTS)],
                )).id
            secret = Secret.generate().text
            created = endpoints.create(session, ADMIN, EndpointIn(
                url=receiver_url + endpoint.path, customer_id=owners[endpoint.owner], auth=endpoint.auth,
                secret=secret, max_in_flight=64,
            ))
            secrets[endpoint.path] = [secret]
            for body in endpoint.subscriptions:
                made = subscription.create(session, ADMIN, body.model_copy(update={"endpoint_id": created.id}))
                described[made.id] = f"{endpoint.path}: {body.mode}, {body.tenant_scope}, {len(body.event_types)} types"
    return Seeded(secrets, described)


__all__ = ["DEMO_PREFIX", "HOT_TENANTS", "SeedEndpoint", "Seeded", "demo_endpoints", "seed"]
