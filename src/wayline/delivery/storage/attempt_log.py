"""Every delivery attempt, as the customer sees it in the API.

The store keeps an attempt where its outcome lands: a success is the one row of the
delivery log (attempt number included), every other attempt — failed, cut by the
deadline — is a row of the attempt log (:class:`~wayline.delivery.storage.store.AttemptLogEntry`).
A delivery that was *not sent* (circuit open, endpoint throttled by its ``Retry-After``,
no slot before the deadline, subscription gone) is listed too, with outcome ``held``: it
says why the delivery waited, and is not an attempt — its ``attempt`` is the number the
held-back attempt would have had. Writing only failures there keeps the healthy path at
one row per delivery; listing reads both tables as one, newest first.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
from pydantic import BaseModel
from sqlalchemy import Float, Select, case, cast, func, literal, select, tuple_, union_all
from sqlalchemy.orm import Session

from wayline.core.errors import RejectedInput
from wayline.delivery.storage.store import AttemptLogEntry, DeliveryLogEntry
from wayline.registry.access import Caller, owned
from wayline.registry.models import Endpoint, Subscription

AttemptOutcome = Literal["succeeded", "failed", "held"]


class AttemptOut(BaseModel):
    webhook_id: str
    endpoint_id: str
    subscription_id: str
    attempt: int
    outcome: AttemptOutcome
    status: int | None
    error: str
    latency_ms: int
    attempted_at: datetime
    event_type: str | None = None
    """The CloudEvent type sent (a batch: its types, comma-separated); None for older rows."""


class AttemptPage(BaseModel):
    data: list[AttemptOut]
    next_cursor: str | None


def _attempts() -> Any:
    """Both tables as one, in the columns of :class:`AttemptOut`."""
    log = DeliveryLogEntry
    return union_all(
        select(log.webhook_id, log.endpoint_id, log.subscription_id, log.attempt,
               literal("succeeded").label("outcome"), log.status.label("status"), literal("").label("error"),
               log.latency_ms, log.delivered_at.label("attempted_at"), log.event_type),
        select(AttemptLogEntry.webhook_id, AttemptLogEntry.endpoint_id, AttemptLogEntry.subscription_id,
               AttemptLogEntry.attempt,
               case((AttemptLogEntry.held_back, literal("held")), else_=literal("failed")).label("outcome"),
               AttemptLogEntry.status,
               AttemptLogEntry.error, AttemptLogEntry.latency_ms, AttemptLogEntry.attempted_at,
               AttemptLogEntry.event_type),
    ).subquery("attempts")


def _encode(row: Any) -> str:
    raw = orjson.dumps([row.attempted_at.isoformat(), row.webhook_id, row.attempt])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, str, int]:
    try:
        at, webhook_id, attempt = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(at), str(webhook_id), int(attempt)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise RejectedInput("cursor: not a cursor this API returned") from exc


def _filtered(session: Session, caller: Caller, attempts: Any, *, endpoint_id: str | None,
              subscription_id: str | None, webhook_id: str | None, outcome: AttemptOutcome | None, held: bool,
              since: datetime | None, until: datetime | None) -> Select[Any]:
    if endpoint_id is not None:
        owned(session, Endpoint, endpoint_id, caller, "endpoint")
    if subscription_id is not None:
        owned(session, Subscription, subscription_id, caller, "subscription")
    query: Select[Any] = select(attempts)
    if endpoint_id is not None:
        query = query.where(attempts.c.endpoint_id == endpoint_id)
    if subscription_id is not None:
        query = query.where(attempts.c.subscription_id == subscription_id)
    if webhook_id is not None:
        query = query.where(attempts.c.webhook_id == webhook_id)
    if not caller.is_admin:
        query = query.where(attempts.c.endpoint_id.in_(
            select(Endpoint.id).where(Endpoint.customer_id == caller.customer_id)))
    if outcome is not None:
        query = query.where(attempts.c.outcome == outcome)
    if not held:
        query = query.where(attempts.c.outcome != "held")
    if since is not None:
        query = query.where(attempts.c.attempted_at >= since)
    if until is not None:
        query = query.where(attempts.c.attempted_at < until)
    return query


def list_attempts(
    session: Session,
    caller: Caller,
    *,
    endpoint_id: str | None = None,
    subscription_id: str | None = None,
    webhook_id: str | None = None,
    outcome: AttemptOutcome | None = None,
    held: bool = True,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 100,
    max_limit: int = 500,
) -> AttemptPage:
    """Attempts newest first, filtered (``held=False``: without the held-back deliveries,
    which are no attempts); a customer sees only its own endpoints' attempts."""
    if not 1 <= limit <= max_limit:
        raise RejectedInput(f"limit: must be between 1 and {max_limit}")
    attempts = _attempts()
    query = _filtered(session, caller, attempts, endpoint_id=endpoint_id, subscription_id=subscription_id,
                      webhook_id=webhook_id, outcome=outcome, held=held, since=since, until=until)
    if cursor:
        position = tuple_(attempts.c.attempted_at, attempts.c.webhook_id, attempts.c.attempt)
        query = query.where(position < tuple_(*_decode(cursor)))
    order = (attempts.c.attempted_at.desc(), attempts.c.webhook_id.desc(), attempts.c.attempt.desc())
    rows = list(session.execute(query.order_by(*order).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return AttemptPage(
        data=[AttemptOut.model_validate(row._mapping) for row in rows],
        next_cursor=_encode(rows[-1]) if more else None,
    )


def count_held(
    session: Session,
    caller: Caller,
    *,
    endpoint_id: str | None = None,
    webhook_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    at_most: int = 10_000,
) -> int:
    """How many held-back deliveries match, counted up to ``at_most`` (a bounded read, however
    many a hanging endpoint piled up)."""
    attempts = _attempts()
    held = _filtered(session, caller, attempts, endpoint_id=endpoint_id, subscription_id=None,
                     webhook_id=webhook_id, outcome="held", held=True, since=since, until=until)
    return session.scalar(select(func.count()).select_from(held.limit(at_most).subquery())) or 0


class HealthBucket(BaseModel):
    start: datetime
    attempts: int
    succeeded: int
    p95_latency_ms: float | None

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.attempts if self.attempts else 1.0


def endpoint_health(session: Session, caller: Caller, endpoint_id: str, since: datetime,
                    bucket: timedelta | None = None) -> list[HealthBucket]:
    """An endpoint's attempts since ``since`` in buckets of ``bucket`` (None: one bucket),
    oldest first: how many, how many succeeded, and the 95th percentile of their latency.
    Held deliveries were not sent, so they count for neither."""
    owned(session, Endpoint, endpoint_id, caller, "endpoint")
    attempts = _attempts()
    if bucket is None:
        start = literal(since).label("start")  # one aggregate row, even over no attempts
    else:
        width = bucket.total_seconds()
        epoch = func.extract("epoch", attempts.c.attempted_at)
        start = func.to_timestamp(func.floor(epoch / width) * width).label("start")
    query = (
        select(start, func.count().label("attempts"),
               func.count().filter(attempts.c.outcome == "succeeded").label("succeeded"),
               func.percentile_cont(0.95).within_group(cast(attempts.c.latency_ms, Float)).label("p95_latency_ms"))
        .where(attempts.c.endpoint_id == endpoint_id, attempts.c.outcome != "held", attempts.c.attempted_at >= since)
    )
    if bucket is not None:
        query = query.group_by(start).order_by(start)
    return [HealthBucket.model_validate(row._mapping) for row in session.execute(query)]


__all__ = [
    "AttemptOut", "AttemptOutcome", "AttemptPage", "HealthBucket", "count_held", "endpoint_health", "list_attempts",
]
