"""The catalog subscriptions refer to: tenants (with sub-tenants) and event types."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict
from wayline.registry.access import Caller, Page, owned, page
from wayline.registry.event_schema import compile_schema
from wayline.registry.models import EventType, Tenant

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"

# Wayline's own event types (``wayline.delivery.operations``), put in the catalog by
# migration 0005. Each one concerns a single customer's endpoints, so a subscription
# to them gets its own customer's events only, whatever tenant the events carry.
ENDPOINT_DISABLED = "wayline.endpoint.disabled"
MESSAGE_DEAD_LETTERED = "wayline.message.dead_lettered"
OPERATIONAL_EVENT_TYPES = frozenset({ENDPOINT_DISABLED, MESSAGE_DEAD_LETTERED})


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=NAME_PATTERN)
    name: str = Field(default="", max_length=200)
    subtenants: list[str] = Field(default_factory=list, max_length=10_000)


class TenantOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    name: str
    subtenants: list[str]
    created_at: datetime


class EventTypeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=2000)
    json_schema: dict[str, Any] | None = None


class EventTypePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = Field(default=None, max_length=2000)
    json_schema: dict[str, Any] | None = Field(default=None, description="null: the type has no schema any more")


class EventTypeOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    name: str
    description: str
    json_schema: dict[str, Any] | None
    created_at: datetime


def upsert_tenants(session: Session, caller: Caller, bodies: list[TenantIn]) -> int:
    """Create or replace tenants in bulk (the platform syncs its tenant list this way)."""
    caller.require_admin()
    if not bodies:
        return 0
    statement = insert(Tenant).values([b.model_dump() | {"subtenants": sorted(set(b.subtenants))} for b in bodies])
    session.execute(statement.on_conflict_do_update(
        index_elements=[Tenant.id],
        set_={"name": statement.excluded.name, "subtenants": statement.excluded.subtenants},
    ))
    return len(bodies)


def get_tenant(session: Session, caller: Caller, tenant_id: str) -> TenantOut:
    caller.require_admin()
    row = owned(session, Tenant, tenant_id, caller, "tenant")
    return TenantOut.model_validate(row)


def list_tenants(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[TenantOut]:
    caller.require_admin()
    rows, next_cursor = page(session, select(Tenant), Tenant.id, cursor, limit, max_limit)
    return Page[TenantOut](data=[TenantOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def delete_tenant(session: Session, caller: Caller, tenant_id: str) -> None:
    caller.require_admin()
    row = owned(session, Tenant, tenant_id, caller, "tenant")
    session.delete(row)


def create_event_type(session: Session, caller: Caller, body: EventTypeIn) -> EventTypeOut:
    caller.require_admin()
    if session.get(EventType, body.name) is not None:
        raise Conflict(f"event type {body.name} exists already")
    if body.json_schema is not None:
        compile_schema(body.json_schema)
    row = EventType(**body.model_dump())
    session.add(row)
    session.flush()
    session.refresh(row)
    return EventTypeOut.model_validate(row)


def enter_event_type(session: Session, name: str, description: str) -> None:
    """Put ``name`` in the catalog unless it is there already (a rule's output type: the
    rule's own service checked the caller)."""
    session.execute(insert(EventType).values(name=name, description=description)
                    .on_conflict_do_nothing(index_elements=[EventType.name]))


def get_event_type(session: Session, caller: Caller, name: str) -> EventTypeOut:
    row = owned(session, EventType, name, caller, "event type")
    return EventTypeOut.model_validate(row)


def list_event_types(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[EventTypeOut]:
    rows, next_cursor = page(session, select(EventType), EventType.name, cursor, limit, max_limit)
    return Page[EventTypeOut](data=[EventTypeOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def update_event_type(session: Session, caller: Caller, name: str, body: EventTypePatch) -> EventTypeOut:
    """Change the description or the schema; publishers check events against a new schema within
    ``messaging.schema_cache_s``."""
    caller.require_admin()
    row = owned(session, EventType, name, caller, "event type")
    changes = body.model_dump(exclude_unset=True)
    if changes.get("description") is None:
        changes.pop("description", None)
    if changes.get("json_schema") is not None:
        compile_schema(changes["json_schema"])
    for field, value in changes.items():
        setattr(row, field, value)
    session.flush()
    return EventTypeOut.model_validate(row)


def delete_event_type(session: Session, caller: Caller, name: str) -> None:
    caller.require_admin()
    row = owned(session, EventType, name, caller, "event type")
    session.delete(row)


__all__ = [
    "ENDPOINT_DISABLED", "MESSAGE_DEAD_LETTERED", "OPERATIONAL_EVENT_TYPES",
    "EventTypeIn", "EventTypeOut", "EventTypePatch", "TenantIn", "TenantOut", "create_event_type", "delete_event_type",
    "delete_tenant", "enter_event_type", "get_event_type", "get_tenant", "list_event_types", "list_tenants", "update_event_type",
    "upsert_tenants",
]
