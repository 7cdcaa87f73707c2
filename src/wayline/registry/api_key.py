"""API keys: `admin` or `customer:<id>` scope, stored hashed, revocable."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.core.errors import NotFound, Unauthorized
from wayline.registry.access import Caller, Page, owned, page
from wayline.registry.ids import new_id
from wayline.registry.models import ApiKey, Customer
from wayline.registry.secrets import hash_api_key, key_id_of, new_api_key, same_hash


class ApiKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    scope: Literal["admin", "customer"]
    customer_id: str | None = None


class ApiKeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    name: str
    scope: str
    customer_id: str | None
    created_at: datetime
    revoked_at: datetime | None


class NewApiKey(ApiKeyOut):
    key: str = Field(description="shown once; only its hash is stored")


def create(session: Session, caller: Caller, body: ApiKeyIn) -> NewApiKey:
    caller.require_admin()
    customer_id = None
    if body.scope == "customer":
        if body.customer_id is None or session.get(Customer, body.customer_id) is None:
            raise NotFound(f"customer {body.customer_id} not found")
        customer_id = body.customer_id
    key_id = new_id("api_key")
    secret = new_api_key(key_id)
    row = ApiKey(
        id=key_id, name=body.name, customer_id=customer_id, secret_hash=hash_api_key(secret),
        scope="admin" if customer_id is None else f"customer:{customer_id}",
    )
    session.add(row)
    session.flush()
    session.refresh(row)
    return NewApiKey(key=secret, **ApiKeyOut.model_validate(row).model_dump())


def authenticate(session: Session, presented: str) -> Caller:
    """The caller a presented key stands for; Unauthorized for unknown or revoked keys."""
    key_id = key_id_of(presented)
    row = session.get(ApiKey, key_id) if key_id else None
    if row is None or not same_hash(row.secret_hash, hash_api_key(presented)):
        raise Unauthorized("unknown API key")
    if row.revoked_at is not None:
        raise Unauthorized("this API key was revoked")
    return Caller(key_id=row.id, customer_id=row.customer_id)


def caller_of(session: Session, key_id: str) -> Caller:
    """The caller an already authenticated key stands for (a console session keeps only the
    key's id); Unauthorized once the key is revoked or deleted."""
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        raise Unauthorized("this API key was revoked: sign in again with a valid one")
    return Caller(key_id=row.id, customer_id=row.customer_id)


def list_(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[ApiKeyOut]:
    caller.require_admin()
    rows, next_cursor = page(session, select(ApiKey), ApiKey.id, cursor, limit, max_limit)
    return Page[ApiKeyOut](data=[ApiKeyOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def revoke(session: Session, caller: Caller, key_id: str) -> ApiKeyOut:
    caller.require_admin()
    row = owned(session, ApiKey, key_id, caller, "api key")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(timezone.utc)
    session.flush()
    return ApiKeyOut.model_validate(row)


__all__ = ["ApiKeyIn", "ApiKeyOut", "NewApiKey", "authenticate", "caller_of", "create", "list_", "revoke"]
