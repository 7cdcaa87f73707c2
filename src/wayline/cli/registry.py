"""`wayline customers|keys|tenants|event-types|endpoints|subscriptions …`: the registry from
the terminal, through the same service layer as the admin API (with an operator's rights)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import orjson
import typer
from pydantic import BaseModel
from rich.table import Table
from sqlalchemy.orm import Session

from wayline import compose
from wayline.cli.output import console, guarded
from wayline.core.errors import RejectedInput
from wayline.core.settings import Settings
from wayline.registry import api_key, catalog, customer, subscription
from wayline.registry.access import ADMIN, Page
from wayline.registry.endpoint import (
    BasicAuth,
    BearerAuth,
    EndpointIn,
    EndpointPatch,
    EndpointService,
    NoAuth,
    RotateIn,
)

customers_app = typer.Typer(no_args_is_help=True, help="Customers: the accounts that own endpoints.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys (shown once at creation, stored hashed).")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants and their sub-tenants.")
types_app = typer.Typer(no_args_is_help=True, help="The event type catalog.")
endpoints_app = typer.Typer(no_args_is_help=True, help="Webhook endpoints and their signing secrets.")
subscriptions_app = typer.Typer(no_args_is_help=True, help="Which events an endpoint gets, and how.")

APPS = {
    "customers": customers_app, "keys": keys_app, "tenants": tenants_app, "event-types": types_app,
    "endpoints": endpoints_app, "subscriptions": subscriptions_app,
}
Limit = Annotated[int, typer.Option(help="rows to show")]


@contextmanager
def registry() -> Iterator[tuple[Session, EndpointService]]:
    settings = Settings()
    with compose.database(settings) as database, database.transaction() as session:
        yield session, EndpointService.from_settings(settings)


def show(rows: Sequence[BaseModel] | Page[Any], columns: Sequence[str], title: str,
         formats: Mapping[str, Callable[[Any], str]] | None = None) -> None:
    """A table of ``columns``; ``formats`` renders a column's value its own way."""
    items = rows.data if isinstance(rows, Page) else rows
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for item in items:
        values = item.model_dump()
        table.add_row(*((formats or {}).get(column, _cell)(values.get(column)) for column in columns))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict, tuple)):
        return orjson.dumps(value).decode()
    return str(value)


# --- customers -----------------------------------------------------------------------
CUSTOMER_COLUMNS = ("id", "name", "tenants", "created_at")


@customers_app.command("create")
@guarded
def create_customer(
    name: str, tenant: Annotated[list[str] | None, typer.Option(help="a tenant it may subscribe to")] = None,
) -> None:
    with registry() as (session, _):
        created = customer.create(session, ADMIN, customer.CustomerIn(name=name, tenants=tenant or []))
        show([created], CUSTOMER_COLUMNS, "customer created")


@customers_app.command("list")
@guarded
def list_customers(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(customer.list_(session, ADMIN, None, limit, limit), CUSTOMER_COLUMNS, "customers")


@customers_app.command("delete")
@guarded
def delete_customer(customer_id: str) -> None:
    with registry() as (session, _):
        customer.delete(session, ADMIN, customer_id)
    console.print(f"deleted {customer_id}")


# --- keys ------------------------------------------------------------------------------
KEY_COLUMNS = ("id", "name", "scope", "created_at", "revoked_at")


@keys_app.command("create")
@guarded
def create_key(
    name: str,
    customer_id: Annotated[str | None, typer.Option("--customer", help="a customer key; without it, an admin key")] = None,
) -> None:
    body = api_key.ApiKeyIn(name=name, scope="customer" if customer_id else "admin", customer_id=customer_id)
    with registry() as (session, _):
        made = api_key.create(session, ADMIN, body)
    # Lines, not a table: a narrow terminal must not cut the id or break the key, which is
    # copied from here and never shown again.
    owner = f" for {made.customer_id}" if made.customer_id else ""
    console.print(f"API key {made.id} created: {made.name!r}, {made.scope}{owner}", soft_wrap=True, markup=False)
    console.print("key (shown once, on the next line):")
    console.print(made.key, soft_wrap=True, markup=False, highlight=False)


@keys_app.command("list")
@guarded
def list_keys(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(api_key.list_(session, ADMIN, None, limit, limit), KEY_COLUMNS, "API keys")


@keys_app.command("revoke")
@guarded
def revoke_key(key_id: str) -> None:
    with registry() as (session, _):
        show([api_key.revoke(session, ADMIN, key_id)], KEY_COLUMNS, "API key revoked")


# --- tenants and event types -----------------------------------------------------------------
@tenants_app.command("add")
@guarded
def add_tenant(
    tenant_id: str, subtenant: Annotated[list[str] | None, typer.Option(help="a sub-tenant id")] = None, name: str = "",
) -> None:
    with registry() as (session, _):
        catalog.upsert_tenants(session, ADMIN, [catalog.TenantIn(id=tenant_id, name=name, subtenants=subtenant or [])])
    console.print(f"tenant {tenant_id} saved")


@tenants_app.command("list")
@guarded
def list_tenants(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(catalog.list_tenants(session, ADMIN, None, limit, limit), ("id", "name", "subtenants"), "tenants")


@types_app.command("add")
@guarded
def add_event_type(name: str, description: str = "") -> None:
    with registry() as (session, _):
        show([catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=name, description=description))],
             ("name", "description"), "event type created")


@types_app.command("list")
@guarded
def list_event_types(limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(catalog.list_event_types(session, ADMIN, None, limit, limit), ("name", "description"), "event types")


# --- endpoints -------------------------------------------------------------------------
ENDPOINT_COLUMNS = ("id", "customer_id", "url", "auth", "enabled", "disabled_reason", "disabled_subscriptions")


def _disabled_subscriptions(disabled: list[dict[str, Any]]) -> str:
    """A 410 disables a subscription and leaves its endpoint enabled: say which, why and when."""
    return "\n".join(f"{s['id']}: {s['disabled_reason'] or 'disabled'}"
                     f"{' at ' + s['disabled_at'].isoformat(timespec='seconds') if s['disabled_at'] else ''}"
                     for s in disabled or [])


ENDPOINT_FORMATS = {"disabled_subscriptions": _disabled_subscriptions}


def _auth(bearer: str | None, basic: str | None) -> NoAuth | BasicAuth | BearerAuth:
    if bearer and basic:
        raise RejectedInput("give --bearer or --basic, not both")
    if bearer:
        return BearerAuth(kind="bearer", token=bearer)
    if basic:
        username, _, password = basic.partition(":")
        return BasicAuth(kind="basic", username=username, password=password)
    return NoAuth()


@endpoints_app.command("create")
@guarded
def create_endpoint(
    url: str,
    customer_id: Annotated[str, typer.Option("--customer", help="the owning customer")],
    bearer: Annotated[str | None, typer.Option(help="send this bearer token")] = None,
    basic: Annotated[str | None, typer.Option(help="send Basic auth, as user:password")] = None,
    timeout_ms: int = 5000,
    max_in_flight: int = 16,
    description: str = "",
) -> None:
    body = EndpointIn(url=url, customer_id=customer_id, auth=_auth(bearer, basic), timeout_ms=timeout_ms,
                      max_in_flight=max_in_flight, description=description)
    with registry() as (session, endpoints):
        made = endpoints.create(session, ADMIN, body)
    show([made], ENDPOINT_COLUMNS, "endpoint created", ENDPOINT_FORMATS)
    console.print(f"signing secret: [bold]{made.secret}[/]")


@endpoints_app.command("list")
@guarded
def list_endpoints(limit: Limit = 100) -> None:
    with registry() as (session, endpoints):
        show(endpoints.list_(session, ADMIN, None, limit, limit), ENDPOINT_COLUMNS, "endpoints", ENDPOINT_FORMATS)


@endpoints_app.command("show")
@guarded
def show_endpoint(endpoint_id: str) -> None:
    """One endpoint, with its disabled subscriptions and why they were disabled."""
    with registry() as (session, endpoints):
        show([endpoints.get(session, ADMIN, endpoint_id)], ENDPOINT_COLUMNS, endpoint_id, ENDPOINT_FORMATS)


@endpoints_app.command("disable")
@guarded
def disable_endpoint(endpoint_id: str, reason: str = "disabled by an operator") -> None:
    with registry() as (session, endpoints):
        show([endpoints.update(session, ADMIN, endpoint_id, EndpointPatch(enabled=False, disabled_reason=reason))],
             ENDPOINT_COLUMNS, "endpoint disabled", ENDPOINT_FORMATS)


@endpoints_app.command("enable")
@guarded
def enable_endpoint(endpoint_id: str) -> None:
    with registry() as (session, endpoints):
        show([endpoints.update(session, ADMIN, endpoint_id, EndpointPatch(enabled=True))], ENDPOINT_COLUMNS, "endpoint enabled",
             ENDPOINT_FORMATS)


@endpoints_app.command("secrets")
@guarded
def endpoint_secrets(endpoint_id: str) -> None:
    with registry() as (session, endpoints):
        show(endpoints.secrets(session, ADMIN, endpoint_id), ("id", "secret", "created_at", "expires_at"), "signing secrets")


@endpoints_app.command("rotate")
@guarded
def rotate_secret(endpoint_id: str) -> None:
    with registry() as (session, endpoints):
        show(endpoints.rotate(session, ADMIN, endpoint_id, RotateIn()), ("id", "secret", "created_at", "expires_at"),
             "signing secrets after rotation")


@endpoints_app.command("delete")
@guarded
def delete_endpoint(endpoint_id: str) -> None:
    with registry() as (session, endpoints):
        endpoints.delete(session, ADMIN, endpoint_id)
    console.print(f"deleted {endpoint_id}")


# --- subscriptions ---------------------------------------------------------------------
SUBSCRIPTION_COLUMNS = ("id", "endpoint_id", "event_types", "tenant_scope", "tenants", "subtenants", "filter", "mode",
                        "max_count", "max_wait_ms", "enabled", "disabled_reason", "disabled_at")


@subscriptions_app.command("create")
@guarded
def create_subscription(
    endpoint_id: Annotated[str, typer.Option("--endpoint")],
    event_type: Annotated[list[str], typer.Option("--type", help="an event type (repeat for several)")],
    tenant: Annotated[list[str] | None, typer.Option(help="limit to this tenant (repeat)")] = None,
    subtenant: Annotated[list[str] | None, typer.Option(help="limit to tenant/sub-tenant (repeat)")] = None,
    filter_json: Annotated[str | None, typer.Option("--filter", help='a JSON filter, e.g. {"data.amount":{"$gt":5}}')] = None,
    batch: Annotated[bool, typer.Option(help="batch mode instead of streaming")] = False,
    max_count: int | None = None,
    max_wait_ms: int | None = None,
) -> None:
    pairs = [tuple(item.split("/", 1)) for item in subtenant or []]
    if any(len(pair) != 2 for pair in pairs):
        raise RejectedInput("--subtenant takes tenant/sub-tenant, e.g. t-2/d-100")
    try:
        parsed_filter = orjson.loads(filter_json) if filter_json else None
    except orjson.JSONDecodeError as exc:
        raise RejectedInput(f"--filter is not JSON: {exc}") from exc
    body = subscription.SubscriptionIn(
        endpoint_id=endpoint_id, event_types=event_type,
        tenant_scope="subtenants" if pairs else "tenants" if tenant else "all",
        tenants=tenant or None, subtenants=pairs or None, filter=parsed_filter,
        mode="batch" if batch else "streaming", max_count=max_count, max_wait_ms=max_wait_ms,
    )
    with registry() as (session, _):
        show([subscription.create(session, ADMIN, body)], SUBSCRIPTION_COLUMNS, "subscription created")


@subscriptions_app.command("list")
@guarded
def list_subscriptions(endpoint_id: Annotated[str | None, typer.Option("--endpoint")] = None, limit: Limit = 100) -> None:
    with registry() as (session, _):
        show(subscription.list_(session, ADMIN, None, limit, limit, endpoint_id), SUBSCRIPTION_COLUMNS, "subscriptions")


@subscriptions_app.command("delete")
@guarded
def delete_subscription(subscription_id: str) -> None:
    with registry() as (session, _):
        subscription.delete(session, ADMIN, subscription_id)
    console.print(f"deleted {subscription_id}")


__all__ = ["APPS"]
