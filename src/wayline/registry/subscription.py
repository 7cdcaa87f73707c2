"""Subscriptions: which events an endpoint gets, and how they are sent.

Three levels of tenant scope — a whole event type (`all`), an event type for a list of
tenants (`tenants`), or for (tenant, sub-tenant) pairs (`subtenants`) — plus an
optional content filter (see `wayline.registry.filter`), and a delivery mode:
`streaming` (one request per event) or `batch` (one request per `max_count` events or
per `max_wait_ms`, whichever comes first).

Wayline's operational event types are the exception to tenant scope: they concern one
customer's endpoints, so a subscription to them has scope `all` — which a customer's own
key may then use — and receives its own customer's events only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.core.errors import Forbidden, RejectedInput
from wayline.registry.access import Caller, Page, owned, page, scoped
from wayline.registry.catalog import OPERATIONAL_EVENT_TYPES
from wayline.registry.filter import FilterLimits, parse_filter
from wayline.registry.ids import new_id
from wayline.registry.models import Customer, Endpoint, EventType, Subscription, Tenant

Scope = Literal["all", "tenants", "subtenants"]
Mode = Literal["streaming", "batch"]
DEFAULT_MAX_COUNT = 100
DEFAULT_MAX_WAIT_MS = 1000


class _Shape(BaseModel):
    """Fields shared by a new subscription and a change to one, and their consistency rules."""

    model_config = ConfigDict(extra="forbid")
    event_types: list[str] | None = Field(default=None, min_length=1, max_length=100)
    tenant_scope: Scope | None = None
    tenants: list[str] | None = Field(default=None, max_length=10_000)
    subtenants: list[tuple[str, str]] | None = Field(default=None, max_length=10_000)
    filter: dict[str, Any] | None = None
    mode: Mode | None = None
    max_count: int | None = Field(default=None, ge=1, le=10_000)
    max_wait_ms: int | None = Field(default=None, ge=10, le=300_000)
    enabled: bool | None = None


class SubscriptionIn(_Shape):
    endpoint_id: str
    event_types: list[str] = Field(min_length=1, max_length=100)
    tenant_scope: Scope = "all"
    mode: Mode = "streaming"

    @model_validator(mode="after")
    def _consistent(self) -> SubscriptionIn:
        _check_shape(self.tenant_scope, self.tenants or [], self.subtenants or [], self.mode, self.max_count, self.max_wait_ms)
        return self


class SubscriptionPatch(_Shape):
    disabled_reason: str | None = Field(default=None, max_length=500, description="with enabled: false, why")


class SubscriptionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    endpoint_id: str
    customer_id: str
    event_types: list[str]
    tenant_scope: Scope
    tenants: list[str]
    subtenants: list[tuple[str, str]]
    filter: dict[str, Any] | None
    mode: Mode
    max_count: int | None
    max_wait_ms: int | None
    enabled: bool
    disabled_reason: str | None = Field(description="why it was disabled (e.g. its endpoint answered 410 Gone)")
    disabled_at: datetime | None
    created_at: datetime
    updated_at: datetime


def _check_shape(scope: str, tenants: list[str], subtenants: list[Any], mode: str, max_count: int | None, max_wait_ms: int | None) -> None:
    if scope == "all" and (tenants or subtenants):
        raise ValueError("tenant_scope 'all' takes no tenants or subtenants")
    if scope == "tenants" and (not tenants or subtenants):
        raise ValueError("tenant_scope 'tenants' needs a non-empty tenants list and no subtenants")
    if scope == "subtenants" and (not subtenants or tenants):
        raise ValueError("tenant_scope 'subtenants' needs a non-empty subtenants list of [tenant, subtenant] and no tenants")
    if mode == "streaming" and (max_count is not None or max_wait_ms is not None):
        raise ValueError("max_count and max_wait_ms apply to mode 'batch' only")


def _check_references(session: Session, caller: Caller, row: Subscription) -> None:
    """Everything a subscription names must exist, and a customer may only use its tenants."""
    known_types = set(session.scalars(select(EventType.name).where(EventType.name.in_(row.event_types))))
    unknown = sorted(set(row.event_types) - known_types)
    if unknown:
        raise RejectedInput(f"event_types: unknown event type(s) {', '.join(unknown)}")
    operational = OPERATIONAL_EVENT_TYPES.intersection(row.event_types)
    if operational:
        if len(operational) < len(row.event_types):
            raise RejectedInput(
                f"event_types: {', '.join(sorted(operational))} go to their own customer only and cannot share a "
                "subscription with other event types; subscribe to them separately"
            )
        if row.tenant_scope != "all":
            raise RejectedInput("tenant_scope: operational event types are delivered per customer; use 'all', "
                                "which means every one of this customer's own")
    named = set(row.tenants) | {tenant for tenant, _ in row.subtenants}
    # Ownership before existence: a customer asking for a tenant not its own learns nothing
    # about whether that tenant exists.
    if caller.customer_id is not None:
        if row.tenant_scope == "all" and not operational:
            raise Forbidden("tenant_scope 'all' needs an admin key; list the tenants instead")
        customer = session.get(Customer, caller.customer_id)
        allowed = set(customer.tenants if customer else ())
        foreign = sorted(named - allowed)
        if foreign:
            raise Forbidden(f"tenants: this customer may not subscribe to {', '.join(foreign[:10])}")
    if named:
        catalog = {t.id: set(t.subtenants) for t in session.scalars(select(Tenant).where(Tenant.id.in_(named)))}
        missing = sorted(named - set(catalog))
        if missing:
            raise RejectedInput(f"tenants: unknown tenant(s) {', '.join(missing[:10])}")
        bad_pairs = [f"{t}/{s}" for t, s in row.subtenants if s not in catalog[t]]
        if bad_pairs:
            raise RejectedInput(f"subtenants: unknown sub-tenant(s) {', '.join(bad_pairs[:10])}")


def _check_filter(raw: dict[str, Any] | None, limits: FilterLimits | None) -> None:
    """A filter submitted now: within the deployment's limits (None: the language's own only)."""
    if raw is not None:
        if limits is None:
            parse_filter(raw)
        else:
            limits.check(raw)


def create(session: Session, caller: Caller, body: SubscriptionIn, limits: FilterLimits | None = None) -> SubscriptionOut:
    endpoint = owned(session, Endpoint, body.endpoint_id, caller, "endpoint")
    batch = body.mode == "batch"
    row = Subscription(
        id=new_id("subscription"), endpoint_id=endpoint.id, customer_id=endpoint.customer_id,
        event_types=sorted(set(body.event_types)), tenant_scope=body.tenant_scope,
        tenants=sorted(set(body.tenants or [])), subtenants=sorted({tuple(p) for p in body.subtenants or []}),
        filter=body.filter, mode=body.mode,
        max_count=(body.max_count or DEFAULT_MAX_COUNT) if batch else None,
        max_wait_ms=(body.max_wait_ms or DEFAULT_MAX_WAIT_MS) if batch else None,
        enabled=True if body.enabled is None else body.enabled,
    )
    _check_references(session, caller, row)
    _check_filter(row.filter, limits)
    session.add(row)
    session.flush()
    session.refresh(row)
    return SubscriptionOut.model_validate(row)


def get(session: Session, caller: Caller, subscription_id: str) -> SubscriptionOut:
    return SubscriptionOut.model_validate(owned(session, Subscription, subscription_id, caller, "subscription"))


def list_(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int,
          endpoint_id: str | None = None) -> Page[SubscriptionOut]:
    query = scoped(select(Subscription), Subscription, caller)
    if endpoint_id is not None:
        query = query.where(Subscription.endpoint_id == endpoint_id)
    rows, next_cursor = page(session, query, Subscription.id, cursor, limit, max_limit)
    return Page[SubscriptionOut](data=[SubscriptionOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def update(session: Session, caller: Caller, subscription_id: str, body: SubscriptionPatch,
           limits: FilterLimits | None = None) -> SubscriptionOut:
    row = owned(session, Subscription, subscription_id, caller, "subscription")
    changes = body.model_dump(exclude_unset=True, exclude={"disabled_reason"})
    new_filter = "filter" in changes
    if new_filter:
        row.filter = changes.pop("filter")
    if changes.get("mode") == "streaming":
        changes.update(max_count=None, max_wait_ms=None)
    elif changes.get("mode") == "batch" and row.mode != "batch":
        changes.setdefault("max_count", DEFAULT_MAX_COUNT)
        changes.setdefault("max_wait_ms", DEFAULT_MAX_WAIT_MS)
    for name, value in changes.items():
        if value is None and name in ("event_types", "tenant_scope", "mode", "enabled"):
            raise RejectedInput(f"{name}: may not be null")
        if name == "subtenants":
            value = sorted({tuple(pair) for pair in value or []})
        elif name in ("tenants", "event_types"):
            value = sorted(set(value or []))
        setattr(row, name, value)
    try:
        _check_shape(row.tenant_scope, row.tenants, row.subtenants, row.mode, row.max_count, row.max_wait_ms)
    except ValueError as exc:
        raise RejectedInput(str(exc)) from exc
    _check_references(session, caller, row)
    if new_filter:
        _check_filter(row.filter, limits)
    now = datetime.now(timezone.utc)
    if body.enabled is True:
        row.disabled_reason, row.disabled_at = None, None
    elif body.enabled is False:
        row.disabled_reason = body.disabled_reason or caller.disabled_by
        row.disabled_at = now
    row.updated_at = now
    session.flush()
    return SubscriptionOut.model_validate(row)


def delete(session: Session, caller: Caller, subscription_id: str) -> None:
    session.delete(owned(session, Subscription, subscription_id, caller, "subscription"))


__all__ = [
    "DEFAULT_MAX_COUNT", "DEFAULT_MAX_WAIT_MS", "SubscriptionIn", "SubscriptionOut", "SubscriptionPatch",
    "create", "delete", "get", "list_", "update",
]
