"""Who is calling, what they may see, and pages of what they may see.

Every registry operation takes a `Caller`. An admin sees everything; a customer's key
sees only that customer's objects, and someone else's object answers exactly as a
missing one would (NotFound), so ids cannot be probed.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import Session

from wayline.core.errors import Forbidden, NotFound, RejectedInput


@dataclass(frozen=True)
class Caller:
    key_id: str
    customer_id: str | None  # None: an admin key

    @property
    def is_admin(self) -> bool:
        return self.customer_id is None

    @property
    def disabled_by(self) -> str:
        """The reason recorded when this caller disables something without giving one."""
        return f"disabled by {'an operator' if self.is_admin else 'the customer'}"

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("this operation needs an admin key")

    def owner_for(self, requested: str | None) -> str:
        """The customer a new object belongs to: the caller's own, or (admins) the one named."""
        if self.customer_id is not None:
            if requested not in (None, self.customer_id):
                raise NotFound(f"customer {requested} not found")
            return self.customer_id
        if requested is None:
            raise RejectedInput("customer_id: required when an admin key creates this")
        return requested


ADMIN = Caller(key_id="cli", customer_id=None)

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    data: list[T]
    next_cursor: str | None


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise RejectedInput("cursor: not a cursor this API returned") from exc


def page(session: Session, query: Select[Any], id_column: Any, cursor: str | None, limit: int, max_limit: int) -> tuple[list[Any], str | None]:
    """One page in id order (ids sort by creation), and the cursor for the next one."""
    if not 1 <= limit <= max_limit:
        raise RejectedInput(f"limit: must be between 1 and {max_limit}")
    if cursor:
        query = query.where(id_column > decode_cursor(cursor))
    rows = list(session.scalars(query.order_by(id_column).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(_id_of(rows[-1], id_column)) if more else None


def _id_of(row: Any, id_column: Any) -> str:
    return str(getattr(row, id_column.key))


def owned(session: Session, model: Any, object_id: str, caller: Caller, what: str) -> Any:
    row = session.get(model, object_id)
    if row is None or (caller.customer_id is not None and getattr(row, "customer_id", None) != caller.customer_id):
        raise NotFound(f"{what} {object_id} not found")
    return row


def scoped(query: Select[Any], model: Any, caller: Caller) -> Select[Any]:
    return query if caller.is_admin else query.where(model.customer_id == caller.customer_id)


__all__ = ["ADMIN", "Caller", "Page", "decode_cursor", "encode_cursor", "owned", "page", "scoped"]
