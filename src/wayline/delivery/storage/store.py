"""Where delivery outcomes are kept: the delivery log and the retry store, in PostgreSQL.

- ``delivery_log``: one row per acknowledged ``webhook-id`` (2xx). A micro-batch that is
  replayed after a crash checks it first, so a logged delivery is never sent again.
- ``retry_store``: every delivery the stage did not finish — failed, cut by the stage
  deadline, or not sent because the endpoint's circuit is open — with its attempt count
  and due time, for the retry path to drain (``FOR UPDATE SKIP LOCKED`` on ``due_at``).
  A delivery that needs no further attempt (a permanent 4xx, a 410, the schedule used
  up) is handed over the same way with ``dead_reason`` set: the retry path owns the
  dead-letter store, the delivery stage only hands over.
- ``delivery_attempts``: every attempt that did not succeed (a success is its delivery-log
  row), so a customer can see each attempt's status, error and time; and, marked
  ``held_back``, each time a delivery was not sent (circuit open, endpoint throttled, no
  slot before the deadline) — those are not attempts and spend none of the schedule.
- ``endpoint_health``: per endpoint, since when its retries fail and until when it asked
  not to be sent anything (``Retry-After``); ``gone_subscriptions``: subscriptions whose
  endpoint answered 410 Gone. Both are written with the outcomes and read by every stage
  of both paths before it sends, whatever the age of its registry snapshot.
- ``dead_letters``: deliveries no attempt is left for, moved there by the retry path; a
  customer polls, acknowledges and replays them (:mod:`wayline.delivery.storage.dead_letter`).

Both writes are idempotent (``ON CONFLICT DO NOTHING``): a replayed stage may write the
same rows again. The tables live in the registry's database and its migrations.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timezone
from typing import Any

import orjson
from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    Identity,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Mapped, mapped_column

from wayline.core.errors import RetryLater
from wayline.delivery.attempt import DeadLettered, Gone, Pending, State, Succeeded, WillRetry
from wayline.delivery.retry import HeldBack, retry_after
from wayline.delivery.stage import Blocked, Screening
from wayline.delivery.transports.base import Failure, FailureKind, Response, Result
from wayline.registry.models import Base, Subscription

GONE_REASON = "gone"
# Enough of a receiver's answer to tell what went wrong, not a copy of its error page.
MAX_ERROR_CHARS = 500
# A batch of many types is listed by its first ones.
MAX_EVENT_TYPE_CHARS = 500


class DeliveryLogEntry(Base):
    __tablename__ = "delivery_log"
    webhook_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(String(40), nullable=False)
    subscription_id: Mapped[str] = mapped_column(String(40), nullable=False)
    status: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    latency_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    attempt: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    delivered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    event_type: Mapped[str | None] = mapped_column(Text)
    """What :func:`event_type` reads in the body; NULL for rows logged before it was kept."""


class RetryEntry(Base):
    """A :class:`~wayline.delivery.attempt.Pending` waiting for the retry path."""

    __tablename__ = "retry_store"
    __table_args__ = (
        # The drain query reads due entries in order; handed-over dead letters never are.
        Index("ix_retry_store_due_at", "due_at", postgresql_where=text("dead_reason IS NULL")),
    )
    webhook_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    endpoint_id: Mapped[str] = mapped_column(String(40), nullable=False)
    subscription_id: Mapped[str] = mapped_column(String(40), nullable=False)
    event_ids: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    attempts: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_error: Mapped[str] = mapped_column(Text, nullable=False)
    # NULL: retry at due_at. Otherwise why no attempt is left: "rejected", "exhausted", "gone".
    dead_reason: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class AttemptLogEntry(Base):
    """One attempt that did not succeed."""

    __tablename__ = "delivery_attempts"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    endpoint_id: Mapped[str] = mapped_column(String(40), nullable=False)
    subscription_id: Mapped[str] = mapped_column(String(40), nullable=False)
    attempt: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    status: Mapped[int | None] = mapped_column(SmallInteger)
    """The HTTP status, or NULL when no answer came (timeout, connection, deadline, circuit open)."""
    error: Mapped[str] = mapped_column(Text, nullable=False)
    latency_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    attempted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    held_back: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    """Not sent, so no attempt: ``attempt`` is the number the held-back attempt would have had."""
    event_type: Mapped[str | None] = mapped_column(Text)


class EndpointHealth(Base):
    """What the retry path and the endpoint's own answers say about an endpoint."""

    __tablename__ = "endpoint_health"
    endpoint_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    failing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Since when its retries have all failed; NULL again after a success."""
    last_error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    throttled_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Nothing is sent to it before then: it answered 429 or 503 with ``Retry-After``."""


class GoneSubscription(Base):
    """A subscription whose endpoint answered 410 Gone, until the subscription changes again."""

    __tablename__ = "gone_subscriptions"
    subscription_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    gone_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class DeadLetterEntry(Base):
    """A delivery no attempt is left for: the exact body, its endpoint, why, and when."""

    __tablename__ = "dead_letters"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    """Time-ordered (``dl_``): the poll cursor is the last id seen."""
    webhook_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    customer_id: Mapped[str | None] = mapped_column(String(40))
    """Copied from the endpoint when dead-lettered; NULL if it was deleted (then only admins see it)."""
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    endpoint_id: Mapped[str] = mapped_column(String(40), nullable=False)
    subscription_id: Mapped[str] = mapped_column(String(40), nullable=False)
    event_ids: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    attempts: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    reason: Mapped[str] = mapped_column(String(16), nullable=False)
    last_error: Mapped[str] = mapped_column(Text, nullable=False)
    first_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    dead_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


def event_type(body: bytes) -> str | None:
    """The CloudEvent type of a request body, for the attempt log: a batch's types, in order
    of first appearance, comma-separated; None when the body holds no type."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    events = parsed if isinstance(parsed, list) else [parsed]
    types = dict.fromkeys(e["type"] for e in events if isinstance(e, dict) and isinstance(e.get("type"), str))
    return ", ".join(types)[:MAX_EVENT_TYPE_CHARS] or None


def describe(outcome: Result) -> str:
    """An attempt's outcome in words, for the retry store and the attempt log."""
    if isinstance(outcome, Failure):
        return f"{outcome.kind.value}: {outcome.detail}"
    answer = outcome.body.decode("utf-8", "replace").strip()
    return f"HTTP {outcome.status}" + (f": {answer}" if answer else "")


class PostgresDeliveryStore:
    """The store over a SQLAlchemy engine; each call is one transaction (``screen`` one statement)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def screen(self, webhook_ids: Collection[str], subscription_ids: Collection[str],
               endpoint_ids: Collection[str]) -> Screening:
        # One statement: a stage pays this before every send, so one round trip and one
        # connection checkout, not one per table. Array parameters, not one per id: a stage
        # may hold more ids than PostgreSQL takes parameters.
        ids = bindparam("ids", list(webhook_ids), type_=ARRAY(String))
        no_time = cast(null(), DateTime(timezone=True))
        query = union_all(*(
            select(literal(_SETTLED), entry.webhook_id, no_time).where(entry.webhook_id == any_(ids))
            for entry in (DeliveryLogEntry, RetryEntry, DeadLetterEntry)
        ), select(literal(_GONE), Subscription.id, no_time).where(_gone(subscription_ids)),
            select(literal(_THROTTLED), EndpointHealth.endpoint_id, EndpointHealth.throttled_until).where(
                _throttled(endpoint_ids)))
        try:
            with self._engine.connect() as connection:
                rows = connection.execute(query).all()
        except OperationalError as exc:
            raise RetryLater(f"the delivery store is unreachable: {exc.orig}") from exc
        return Screening(
            frozenset(key for kind, key, _ in rows if kind == _SETTLED),
            Blocked(frozenset(key for kind, key, _ in rows if kind == _GONE),
                    {key: until for kind, key, until in rows if kind == _THROTTLED}))

    def record(self, states: Sequence[State]) -> None:
        succeeded = [s for s in states if isinstance(s, Succeeded)]
        failed = [s for s in states if not isinstance(s, Succeeded)]
        handed_over = [_retry_row(s) for s in failed]
        now = datetime.now(timezone.utc)
        try:
            with self._engine.begin() as connection:
                if succeeded:
                    connection.execute(_LOG_INSERT, {"rows": _log_rows(succeeded).decode()})
                # executemany: SQLAlchemy pages the rows into multi-row INSERTs.
                if handed_over:
                    connection.execute(insert(RetryEntry).on_conflict_do_nothing(), handed_over)
                attempted = [attempt_row(s, now) for s in failed if not _deferred(s)]
                if attempted:
                    connection.execute(insert(AttemptLogEntry), attempted)
                mark_endpoints_and_subscriptions(connection, failed, now)
        except OperationalError as exc:
            raise RetryLater(f"the delivery store is unreachable: {exc.orig}") from exc


def blocked(connection: Connection, subscription_ids: Collection[str], endpoint_ids: Collection[str]) -> Blocked:
    """Which of these subscriptions are gone and which of these endpoints are throttled, on an
    open connection (the retry path's check; a stage's is part of :meth:`PostgresDeliveryStore.screen`)."""
    gone = set(connection.scalars(select(Subscription.id).where(_gone(subscription_ids)))) if subscription_ids else set()
    throttled: dict[str, datetime] = dict(connection.execute(select(
        EndpointHealth.endpoint_id, EndpointHealth.throttled_until).where(_throttled(endpoint_ids))).tuples().all()
    ) if endpoint_ids else {}
    return Blocked(frozenset(gone), throttled)


_SETTLED, _GONE, _THROTTLED = "settled", "gone", "throttled"


def _gone(subscription_ids: Collection[str]) -> ColumnElement[bool]:
    """Of these subscriptions, those disabled or whose endpoint answered 410 Gone since they last changed."""
    ids = bindparam("subscription_ids", list(subscription_ids), type_=ARRAY(String))
    # Ids that are no subscription (the test events' pseudo-subscription) are never gone.
    fresh_410 = exists().where(GoneSubscription.subscription_id == Subscription.id,
                               GoneSubscription.gone_at > Subscription.updated_at)
    return and_(Subscription.id == any_(ids), or_(Subscription.enabled.is_(False), fresh_410))


def _throttled(endpoint_ids: Collection[str]) -> ColumnElement[bool]:
    """Of these endpoints, those paused (``Retry-After``) until a time still to come."""
    ids = bindparam("endpoint_ids", list(endpoint_ids), type_=ARRAY(String))
    return and_(EndpointHealth.endpoint_id == any_(ids), EndpointHealth.throttled_until > func.now())


def mark_endpoints_and_subscriptions(connection: Connection, failed: Sequence[WillRetry | DeadLettered | Gone],
                                     now: datetime) -> None:
    """Keep what failed answers said for every sender to see: a ``Retry-After`` pauses its
    endpoint, a 410 marks its subscription gone."""
    pauses: dict[str, datetime] = {}
    gone: set[str] = set()
    for state in failed:
        pending, outcome, _ = failed_attempt(state)
        if isinstance(state, Gone):
            gone.add(pending.subscription_id)
        pause = retry_after(outcome, now)
        if pause:
            pauses[pending.endpoint_id] = max(pauses.get(pending.endpoint_id, now), now + pause)
    if pauses:
        upsert = insert(EndpointHealth).values(
            [{"endpoint_id": e, "throttled_until": until} for e, until in sorted(pauses.items())])
        connection.execute(upsert.on_conflict_do_update(
            index_elements=[EndpointHealth.endpoint_id],
            set_={"throttled_until": func.greatest(EndpointHealth.throttled_until, upsert.excluded.throttled_until)},
        ))
    if gone:
        # The database's clock, like the subscription's updated_at a change sets afterwards.
        upsert = insert(GoneSubscription).values([{"subscription_id": s, "gone_at": func.now()} for s in sorted(gone)])
        connection.execute(upsert.on_conflict_do_update(
            index_elements=[GoneSubscription.subscription_id], set_={"gone_at": upsert.excluded.gone_at}))


_LOG_COLUMNS = {
    "webhook_id": "text", "endpoint_id": "text", "subscription_id": "text", "status": "smallint",
    "latency_ms": "integer", "attempt": "smallint", "delivered_at": "timestamptz", "event_type": "text",
}
# The hot path of every stage: its successes as one JSON array of rows, one statement and one
# round trip whatever their number. orjson writes the whole array in one call, where binding
# an array per column had psycopg dump every element in Python (a twelfth of a sender
# process's CPU per request, docs/benchmarks.md "The sender hop's CPU per request, again");
# PostgreSQL parses it once as jsonb and reads each row's fields by position.
_LOG_INSERT = text(
    f"INSERT INTO delivery_log ({', '.join(_LOG_COLUMNS)}) "
    f"SELECT {', '.join(f'(r->>{i})::{kind}' for i, kind in enumerate(_LOG_COLUMNS.values()))} "
    "FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS r ON CONFLICT DO NOTHING"
)


def _log_rows(succeeded: Sequence[Succeeded]) -> bytes:
    """The delivery-log rows of ``succeeded`` as a JSON array of rows, columns in
    ``_LOG_COLUMNS``' order."""
    return orjson.dumps([
        (s.delivered.webhook_id, s.delivered.endpoint_id, s.delivered.subscription_id, s.response.status,
         round(s.response.elapsed_s * 1000), s.attempt, s.at, event_type(s.delivered.payload))
        for s in succeeded
    ])


def _deferred(state: WillRetry | DeadLettered | Gone) -> bool:
    outcome = state.outcome if isinstance(state, WillRetry) else None
    return isinstance(outcome, Failure) and outcome.kind is FailureKind.DEFERRED


def failed_attempt(state: WillRetry | DeadLettered | Gone) -> tuple[Pending, Result, str | None]:
    """The delivery as attempted (attempts counted), the attempt's outcome, and the dead reason if any."""
    if isinstance(state, WillRetry):
        return state.next, state.outcome, None
    if isinstance(state, DeadLettered):
        return state.failed, state.outcome, state.reason.value
    return state.failed, state.response, GONE_REASON


def attempt_row(state: WillRetry | DeadLettered | Gone, at: datetime) -> dict[str, Any]:
    """The attempt-log row of a failed or held-back attempt settled at ``at``."""
    pending, outcome, _ = failed_attempt(state)
    held_back = isinstance(outcome, HeldBack)
    return {
        "webhook_id": pending.webhook_id,
        "endpoint_id": pending.endpoint_id,
        "subscription_id": pending.subscription_id,
        "attempt": pending.attempts + 1 if held_back else pending.attempts,
        "status": outcome.status if isinstance(outcome, Response) else None,
        "error": describe(outcome)[:MAX_ERROR_CHARS],
        "latency_ms": round(outcome.elapsed_s * 1000),
        "attempted_at": at,
        "held_back": held_back,
        "event_type": event_type(pending.payload),
    }


def _retry_row(state: WillRetry | DeadLettered | Gone) -> dict[str, Any]:
    pending, outcome, dead_reason = failed_attempt(state)
    return {
        "webhook_id": pending.webhook_id,
        "kind": pending.kind.value,
        "endpoint_id": pending.endpoint_id,
        "subscription_id": pending.subscription_id,
        "event_ids": list(pending.event_ids),
        "payload": pending.payload,
        "attempts": pending.attempts,
        "due_at": pending.due_at,
        "last_error": describe(outcome)[:MAX_ERROR_CHARS],
        "dead_reason": dead_reason,
    }


__all__ = [
    "GONE_REASON",
    "MAX_ERROR_CHARS",
    "MAX_EVENT_TYPE_CHARS",
    "AttemptLogEntry",
    "DeadLetterEntry",
    "DeliveryLogEntry",
    "EndpointHealth",
    "GoneSubscription",
    "PostgresDeliveryStore",
    "RetryEntry",
    "attempt_row",
    "blocked",
    "describe",
    "event_type",
    "failed_attempt",
    "mark_endpoints_and_subscriptions",
]
