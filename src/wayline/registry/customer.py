"""Customers: the accounts that own endpoints and subscriptions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.core.errors import NotFound
from wayline.registry.access import Caller, Page, page
from wayline.registry.ids import new_id
from wayline.registry.models import Customer


class CustomerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    tenants: list[str] = Field(default_factory=list, max_length=10_000,
                               description="tenants whose events this customer may subscribe to")


class CustomerPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    tenants: list[str] | None = Field(default=None, max_length=10_000)


class CustomerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    name: str
    tenants: list[str]
    created_at: datetime
    updated_at: datetime


def create(session: Session, caller: Caller, body: CustomerIn) -> CustomerOut:
    caller.require_admin()
    row = Customer(id=new_id("customer"), name=body.name, tenants=sorted(set(body.tenants)))
    session.add(row)
    session.flush()
    session.refresh(row)
    return CustomerOut.model_validate(row)


def _visible(session: Session, caller: Caller, customer_id: str) -> Customer:
    row = session.get(Customer, customer_id)
    if row is None or caller.customer_id not in (None, customer_id):
        raise NotFound(f"customer {customer_id} not found")
    return row


def get(session: Session, caller: Caller, customer_id: str) -> CustomerOut:
    return CustomerOut.model_validate(_visible(session, caller, customer_id))


def list_(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[CustomerOut]:
    query = select(Customer)
    if not caller.is_admin:
        query = query.where(Customer.id == caller.customer_id)
    rows, next_cursor = page(session, query, Customer.id, cursor, limit, max_limit)
    return Page[CustomerOut](data=[CustomerOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def update(session: Session, caller: Caller, customer_id: str, body: CustomerPatch) -> CustomerOut:
    caller.require_admin()
    row = _visible(session, caller, customer_id)
    if body.name is not None:
        row.name = body.name
    if body.tenants is not None:
        row.tenants = sorted(set(body.tenants))
    row.updated_at = datetime.now().astimezone()
    session.flush()
    return CustomerOut.model_validate(row)


def delete(session: Session, caller: Caller, customer_id: str) -> None:
    caller.require_admin()
    session.delete(_visible(session, caller, customer_id))


__all__ = ["CustomerIn", "CustomerOut", "CustomerPatch", "create", "delete", "get", "list_", "update"]
