"""The dead-letter store as the customer uses it: poll with a cursor, acknowledge, replay.

Polling reads in id order (``dl_`` ids sort by creation); the cursor is the last id
returned, and a page always comes with one, so a poller keeps asking from where it
stopped and sees each dead letter once per cursor position. Only the retry path's driver
writes dead letters, so ids are also commit order and a cursor never skips a late commit.

Acknowledging deletes. Replaying moves a dead letter back into the retry store as a
fresh delivery (attempt count 0, due now): the same ``webhook-id`` and the same bytes,
so the receiver can tell a replay from a new message only by its timestamp.

A customer's key sees only its own dead letters; someone else's answers as a missing one.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson
from pydantic import BaseModel, Field
from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict, NotFound, RejectedInput
from wayline.core.settings import ApiSettings
from wayline.delivery.attempt import Kind, Pending
from wayline.delivery.storage.attempt_log import AttemptOut, list_attempts
from wayline.delivery.storage.store import DeadLetterEntry, RetryEntry
from wayline.registry import endpoint_tests
from wayline.registry.access import Caller, decode_cursor, encode_cursor, owned
from wayline.registry.db import Database
from wayline.registry.ids import new_id
from wayline.registry.models import Endpoint

REPLAY_NOTE = "replay requested"
TEST_SUBSCRIPTION = "test"
"""The subscription id of test events: they belong to no subscription."""
TEST_EVENT_TYPE = "wayline.endpoint.test"


class DeadLetterOut(BaseModel):
    id: str
    webhook_id: str
    endpoint_id: str
    subscription_id: str
    kind: str
    event_ids: list[str]
    payload: Any = Field(description="the exact body every attempt sent (a CloudEvent, or a batch of them)")
    reason: str = Field(description="rejected (a permanent error), exhausted (every attempt failed) or gone (410)")
    attempts: int
    last_error: str
    first_attempt_at: datetime
    dead_at: datetime
    history: list[AttemptOut] = Field(description="every attempt, newest first")


class DeadLetterPage(BaseModel):
    data: list[DeadLetterOut]
    next_cursor: str = Field(description="poll again from here; unchanged when nothing new came")


class AckUpTo(BaseModel):
    cursor: str = Field(description="a next_cursor from a poll: everything up to it is acknowledged")
    endpoint_id: str | None = None


class ReplayRange(BaseModel):
    endpoint_id: str
    since: datetime
    until: datetime


class Acknowledged(BaseModel):
    acknowledged: int


class Replayed(BaseModel):
    replayed: int
    webhook_ids: list[str]


class TestEventIn(BaseModel):
    data: dict[str, Any] = Field(default_factory=dict, description="the test event's data")


class TestEventOut(BaseModel):
    webhook_id: str
    event: dict[str, Any]


def _scoped(query: Any, caller: Caller) -> Any:
    return query if caller.is_admin else query.where(DeadLetterEntry.customer_id == caller.customer_id)


def _out(session: Session, caller: Caller, row: DeadLetterEntry) -> DeadLetterOut:
    history = list_attempts(session, caller, webhook_id=row.webhook_id, limit=100).data
    return DeadLetterOut(
        id=row.id, webhook_id=row.webhook_id, endpoint_id=row.endpoint_id, subscription_id=row.subscription_id,
        kind=row.kind, event_ids=list(row.event_ids), payload=orjson.loads(row.payload), reason=row.reason,
        attempts=row.attempts, last_error=row.last_error, first_attempt_at=row.first_attempt_at,
        dead_at=row.dead_at, history=history,
    )


def _owned(session: Session, caller: Caller, dead_letter_id: str) -> DeadLetterEntry:
    row = session.scalars(
        _scoped(select(DeadLetterEntry), caller).where(DeadLetterEntry.id == dead_letter_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"dead letter {dead_letter_id} not found")
    return row


def poll_dead_letters(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int,
         endpoint_id: str | None = None) -> DeadLetterPage:
    """The dead letters after ``cursor``, oldest first."""
    if not 1 <= limit <= max_limit:
        raise RejectedInput(f"limit: must be between 1 and {max_limit}")
    query = _scoped(select(DeadLetterEntry), caller)
    if endpoint_id is not None:
        owned(session, Endpoint, endpoint_id, caller, "endpoint")
        query = query.where(DeadLetterEntry.endpoint_id == endpoint_id)
    after = decode_cursor(cursor) if cursor else ""
    rows = list(session.scalars(query.where(DeadLetterEntry.id > after).order_by(DeadLetterEntry.id).limit(limit)))
    return DeadLetterPage(
        data=[_out(session, caller, row) for row in rows],
        next_cursor=encode_cursor(rows[-1].id if rows else after),
    )


def get_dead_letter(session: Session, caller: Caller, dead_letter_id: str) -> DeadLetterOut:
    return _out(session, caller, _owned(session, caller, dead_letter_id))


def acknowledge_dead_letter(session: Session, caller: Caller, dead_letter_id: str) -> None:
    session.delete(_owned(session, caller, dead_letter_id))


def acknowledge_up_to(session: Session, caller: Caller, body: AckUpTo) -> Acknowledged:
    """Delete every dead letter (of one endpoint, if named) up to and including the cursor."""
    last = decode_cursor(body.cursor)
    query = _scoped(delete(DeadLetterEntry), caller).where(DeadLetterEntry.id <= last)
    if body.endpoint_id is not None:
        owned(session, Endpoint, body.endpoint_id, caller, "endpoint")
        query = query.where(DeadLetterEntry.endpoint_id == body.endpoint_id)
    return Acknowledged(acknowledged=session.execute(query).rowcount)


def _enabled(session: Session, caller: Caller, endpoint_id: str) -> Endpoint:
    endpoint = owned(session, Endpoint, endpoint_id, caller, "endpoint")
    if not endpoint.enabled:
        raise Conflict(f"endpoint {endpoint_id} is disabled ({endpoint.disabled_reason}): re-enable it first")
    return endpoint


def _requeue(session: Session, rows: list[DeadLetterEntry], now: datetime) -> Replayed:
    if rows:
        session.execute(insert(RetryEntry).on_conflict_do_nothing(), [
            {"webhook_id": r.webhook_id, "kind": r.kind, "endpoint_id": r.endpoint_id,
             "subscription_id": r.subscription_id, "event_ids": r.event_ids, "payload": r.payload, "attempts": 0,
             "due_at": now, "last_error": REPLAY_NOTE, "dead_reason": None}
            for r in rows
        ])
        session.execute(delete(DeadLetterEntry).where(DeadLetterEntry.id.in_([r.id for r in rows])))
    return Replayed(replayed=len(rows), webhook_ids=[r.webhook_id for r in rows])


def replay_dead_letter(session: Session, caller: Caller, dead_letter_id: str, now: datetime | None = None) -> Replayed:
    """Send one dead letter again, from the start of the schedule."""
    row = _owned(session, caller, dead_letter_id)
    _enabled(session, caller, row.endpoint_id)
    return _requeue(session, [row], now or datetime.now(timezone.utc))


def replay_dead_letters(session: Session, caller: Caller, body: ReplayRange, now: datetime | None = None) -> Replayed:
    """Send again every dead letter of an endpoint that died in ``[since, until)``."""
    if body.until <= body.since:
        raise RejectedInput("until: must be after since")
    _enabled(session, caller, body.endpoint_id)
    rows = list(session.scalars(
        _scoped(select(DeadLetterEntry), caller)
        .where(DeadLetterEntry.endpoint_id == body.endpoint_id, DeadLetterEntry.dead_at >= body.since,
               DeadLetterEntry.dead_at < body.until)
        .order_by(DeadLetterEntry.id).with_for_update()
    ))
    return _requeue(session, rows, now or datetime.now(timezone.utc))


def send_test_event(database: Database, caller: Caller, endpoint_id: str, body: TestEventIn,
                    limits: ApiSettings) -> TestEventOut:
    """Queue a signed test event for the caller's endpoint, within the test-event limits: its
    size (``api.test_event_max_bytes``) and how many per endpoint per minute
    (``api.test_events_per_minute``). What the API's and the console's test buttons do."""
    endpoint_tests.check_size(body.data, limits.test_event_max_bytes)
    with database.transaction() as session:
        owned(session, Endpoint, endpoint_id, caller, "endpoint")
        endpoint_tests.admit(session, endpoint_id, limits.test_events_per_minute)
        return _queue_test_event(session, caller, endpoint_id, body, new_id("test_event"))


def _queue_test_event(session: Session, caller: Caller, endpoint_id: str, body: TestEventIn,
                      event_id: str, now: datetime | None = None) -> TestEventOut:
    """Queue a signed test event for the endpoint; the retry path sends it within a poll
    interval, and its attempts show in the attempt log like any delivery's."""
    endpoint = _enabled(session, caller, endpoint_id)
    now = now or datetime.now(timezone.utc)
    event = {"specversion": "1.0", "id": event_id, "source": "/wayline/test", "type": TEST_EVENT_TYPE,
             "time": now.isoformat(), "tenantid": endpoint.customer_id, "data": body.data}
    pending = Pending.single(event_id, orjson.dumps(event), subscription_id=TEST_SUBSCRIPTION,
                             endpoint_id=endpoint_id, now=now)
    session.execute(insert(RetryEntry), [{
        "webhook_id": pending.webhook_id, "kind": Kind.SINGLE.value, "endpoint_id": endpoint_id,
        "subscription_id": TEST_SUBSCRIPTION, "event_ids": [event_id], "payload": pending.payload, "attempts": 0,
        "due_at": now, "last_error": "test event", "dead_reason": None,
    }])
    return TestEventOut(webhook_id=pending.webhook_id, event=event)


__all__ = [
    "REPLAY_NOTE",
    "TEST_EVENT_TYPE",
    "TEST_SUBSCRIPTION",
    "AckUpTo",
    "Acknowledged",
    "DeadLetterOut",
    "DeadLetterPage",
    "ReplayRange",
    "Replayed",
    "TestEventIn",
    "TestEventOut",
    "acknowledge_dead_letter",
    "acknowledge_up_to",
    "get_dead_letter",
    "poll_dead_letters",
    "replay_dead_letter",
    "replay_dead_letters",
    "send_test_event",
]
