"""The retry path's side of the stores: claim due entries, settle them, bury the dead.

A retry entry goes round one cycle per attempt:

1. **claim** (:meth:`RetryQueue.claim`): due rows of one shard of endpoints are taken with
   ``FOR UPDATE SKIP LOCKED`` and leased in the same statement — their ``due_at`` is pushed
   to the end of the lease and committed at once, so no transaction stays open while
   HTTP requests run, and two drainers never take the same row;
2. **attempt** (:func:`run_retry_stage`): the claimed deliveries go through the same
   dispatcher, signing, limits, deadline and breakers as the main path, *without* the
   store's "already settled" check (the entry itself is what that check would find);
3. **settle** (:meth:`RetryQueue.settle`), one transaction: a success is logged and its
   entry deleted; a failure updates the entry (attempts, next due time, error) or, when
   no attempt is left, marks it dead — but only if the entry still carries this claim's
   lease, so an attempt that outlived its lease cannot overwrite a newer claim's outcome.

If the process dies between 1 and 3 the lease runs out and the entry is due again: an
entry is never lost, and one whose success was logged is never sent again (the log row
and the delete commit together).

**bury** (:meth:`RetryQueue.bury`) moves every entry marked dead — by the main path's
stage or by step 3 — into the dead-letter store; :meth:`RetryQueue.failing_endpoints`
finds endpoints whose retries have failed for too long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, bindparam, delete, exists, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from wayline.core.errors import RetryLater
from wayline.delivery.attempt import DeadLettered, Gone, Kind, Pending, State, Succeeded, WillRetry
from wayline.delivery.outcomes import Tally
from wayline.delivery.retry import HeldBack, Random
from wayline.delivery.stage import Blocked, Run, StageSettings, TransportFactory, abandon, attempt_all, utc_now
from wayline.delivery.storage.store import (
    MAX_ERROR_CHARS,
    AttemptLogEntry,
    DeadLetterEntry,
    DeliveryLogEntry,
    EndpointHealth,
    RetryEntry,
    attempt_row,
    blocked,
    describe,
    event_type,
    failed_attempt,
    mark_endpoints_and_subscriptions,
)
from wayline.delivery.targets import Target
from wayline.registry.ids import new_id
from wayline.registry.models import Endpoint


@dataclass(frozen=True, slots=True)
class Claim:
    """A retry entry taken by one drainer until ``leased_until``."""

    pending: Pending
    leased_until: datetime


@dataclass(frozen=True, slots=True)
class Buried:
    """A delivery just moved to the dead-letter store."""

    dead_letter_id: str
    webhook_id: str
    customer_id: str | None
    endpoint_id: str
    subscription_id: str
    event_ids: tuple[str, ...]
    reason: str
    attempts: int
    last_error: str
    dead_at: datetime


@dataclass(frozen=True, slots=True)
class Failing:
    """An enabled endpoint whose retries have failed since ``since``."""

    endpoint_id: str
    since: datetime
    last_error: str


class RetryQueue:
    """The retry store as the retry path uses it; every call is one transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def claim(self, shard: int, shards: int, limit: int, lease: timedelta, now: datetime) -> list[Claim]:
        """Up to ``limit`` entries due at ``now`` whose endpoint hashes to ``shard`` of ``shards``, oldest due first."""
        leased_until = now + lease
        # One endpoint's entries always land in one shard: its in-flight and rate limits
        # then hold in one task, as on the main path. An endpoint that asked for a pause
        # (Retry-After) gets nothing before it ends, whatever its entries' due times say.
        throttled = exists().where(EndpointHealth.endpoint_id == RetryEntry.endpoint_id,
                                   EndpointHealth.throttled_until > now)
        due = (
            select(RetryEntry.webhook_id)
            .where(RetryEntry.dead_reason.is_(None), RetryEntry.due_at <= now, ~throttled,
                   text("(hashtext(endpoint_id) & 2147483647) % :shards = :shard").bindparams(
                       shards=shards, shard=shard))
            .order_by(RetryEntry.due_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        claim = (
            update(RetryEntry)
            .where(RetryEntry.webhook_id.in_(due.scalar_subquery()))
            .values(due_at=leased_until)
            .returning(RetryEntry)
        )
        with self._transaction() as session:
            return [Claim(_pending(row), leased_until) for row in session.scalars(claim)]

    def any_due(self, now: datetime) -> bool:
        """Is any entry due at ``now``? One index probe: lets the retry query skip an idle drain."""
        due = select(RetryEntry.webhook_id).where(RetryEntry.dead_reason.is_(None), RetryEntry.due_at <= now).limit(1)
        with self._transaction() as session:
            return session.scalars(due).first() is not None

    def blocked(self, subscription_ids: Collection[str], endpoint_ids: Collection[str]) -> Blocked:
        """Which of these subscriptions are gone and endpoints throttled (as the main path checks)."""
        with self._transaction() as session:
            return blocked(session.connection(), subscription_ids, endpoint_ids)

    def settle(self, claims: Sequence[Claim], states: Sequence[State], now: datetime) -> None:
        """Keep the outcome of the attempts (``states``) of claimed entries (any of ``claims``)."""
        succeeded = [s for s in states if isinstance(s, Succeeded)]
        failed = [s for s in states if not isinstance(s, Succeeded)]
        lease = {claim.pending.webhook_id: claim.leased_until for claim in claims}
        with self._transaction() as session:
            if succeeded:
                session.execute(insert(DeliveryLogEntry).on_conflict_do_nothing(), [
                    {"webhook_id": s.delivered.webhook_id, "endpoint_id": s.delivered.endpoint_id,
                     "subscription_id": s.delivered.subscription_id, "status": s.response.status,
                     "latency_ms": round(s.response.elapsed_s * 1000), "attempt": s.attempt, "delivered_at": s.at,
                     "event_type": event_type(s.delivered.payload)}
                    for s in succeeded
                ])
                # A success is final whoever holds the lease now.
                session.execute(delete(RetryEntry).where(
                    RetryEntry.webhook_id.in_([s.delivered.webhook_id for s in succeeded])))
            if failed:
                # One statement for all, executed as a pipelined executemany (a round trip
                # per entry made settling ten times slower).
                entries = RetryEntry.__table__
                reschedule = (
                    update(entries)
                    .where(entries.c.webhook_id == bindparam("b_webhook_id"), entries.c.due_at == bindparam("b_lease"))
                    .values(attempts=bindparam("b_attempts"), due_at=bindparam("b_due_at"),
                            last_error=bindparam("b_last_error"), dead_reason=bindparam("b_dead_reason"))
                )
                rows = []
                for state in failed:
                    pending, outcome, dead_reason = failed_attempt(state)
                    rows.append({"b_webhook_id": pending.webhook_id, "b_lease": lease[pending.webhook_id],
                                 "b_attempts": pending.attempts, "b_due_at": now if dead_reason else pending.due_at,
                                 "b_last_error": describe(outcome)[:MAX_ERROR_CHARS], "b_dead_reason": dead_reason})
                session.connection().execute(reschedule, rows)
                session.execute(insert(AttemptLogEntry), [attempt_row(s, now) for s in failed])
                mark_endpoints_and_subscriptions(session.connection(), failed, now)
            self._track_health(session, succeeded, failed, now)

    def _track_health(self, session: Session, succeeded: Sequence[Succeeded],
                      failed: Sequence[WillRetry | DeadLettered | Gone], now: datetime) -> None:
        healthy = {s.delivered.endpoint_id for s in succeeded}
        if healthy:
            session.execute(update(EndpointHealth).where(EndpointHealth.endpoint_id.in_(healthy))
                            .values(failing_since=None, last_error=""))
        failing: dict[str, str] = {}
        for state in failed:
            pending, outcome, _ = failed_attempt(state)
            # What was not sent says nothing new about the endpoint.
            if pending.endpoint_id not in healthy and not isinstance(outcome, HeldBack):
                failing[pending.endpoint_id] = describe(outcome)[:MAX_ERROR_CHARS]
        if failing:
            upsert = insert(EndpointHealth).values(
                [{"endpoint_id": e, "failing_since": now, "last_error": error} for e, error in sorted(failing.items())]
            )
            session.execute(upsert.on_conflict_do_update(
                index_elements=[EndpointHealth.endpoint_id],
                set_={"failing_since": func.coalesce(EndpointHealth.failing_since, upsert.excluded.failing_since),
                      "last_error": upsert.excluded.last_error},
            ))

    def bury(self, limit: int, now: datetime, before_commit: Callable[[list[Buried]], None]) -> list[Buried]:
        """Move up to ``limit`` dead entries to the dead-letter store. ``before_commit`` sees
        them inside the transaction (to announce them): if it fails, nothing moves."""
        with self._transaction() as session:
            rows = list(session.scalars(
                select(RetryEntry).where(RetryEntry.dead_reason.is_not(None))
                .order_by(RetryEntry.due_at).limit(limit).with_for_update(skip_locked=True)
            ))
            if not rows:
                return []
            owners = {
                endpoint_id: customer_id
                for endpoint_id, customer_id in session.execute(
                    select(Endpoint.id, Endpoint.customer_id).where(Endpoint.id.in_(sorted({r.endpoint_id for r in rows})))
                )
            }
            buried = [
                Buried(dead_letter_id=new_id("dead_letter"), webhook_id=r.webhook_id,
                       customer_id=owners.get(r.endpoint_id), endpoint_id=r.endpoint_id,
                       subscription_id=r.subscription_id, event_ids=tuple(r.event_ids), reason=str(r.dead_reason),
                       attempts=r.attempts, last_error=r.last_error, dead_at=now)
                for r in rows
            ]
            # A message dead-lettered again after a replay replaces its earlier dead letter.
            session.execute(delete(DeadLetterEntry).where(
                DeadLetterEntry.webhook_id.in_([b.webhook_id for b in buried])))
            session.execute(insert(DeadLetterEntry), [
                {"id": b.dead_letter_id, "webhook_id": r.webhook_id, "customer_id": b.customer_id, "kind": r.kind,
                 "endpoint_id": r.endpoint_id, "subscription_id": r.subscription_id, "event_ids": r.event_ids,
                 "payload": r.payload, "attempts": r.attempts, "reason": b.reason, "last_error": r.last_error,
                 "first_attempt_at": r.created_at, "dead_at": now}
                for b, r in zip(buried, rows, strict=True)
            ])
            session.execute(delete(RetryEntry).where(RetryEntry.webhook_id.in_([r.webhook_id for r in rows])))
            before_commit(buried)
        return buried

    def expire(self, history_before: datetime, dead_letters_before: datetime, limit: int) -> bool:
        """Delete up to ``limit`` of the oldest rows of each of the delivery log and the attempt
        log (older than ``history_before``) and the dead letters (older than
        ``dead_letters_before``), in one short transaction; ``True`` while more may be left."""
        full = False
        with self._transaction() as session:
            for table, column, before in (("delivery_log", "delivered_at", history_before),
                                          ("delivery_attempts", "attempted_at", history_before),
                                          ("dead_letters", "dead_at", dead_letters_before)):
                # By ctid: one statement for the three tables, whatever their keys.
                deleted = session.execute(text(
                    f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("
                    f"SELECT ctid FROM {table} WHERE {column} < :before ORDER BY {column} LIMIT :limit))"
                ), {"before": before, "limit": limit}).rowcount
                full = full or deleted == limit
        return full

    def failing_now(self) -> frozenset[str]:
        """Endpoints whose latest retry failed: the delivery job hands their messages to the retry path."""
        with self._transaction() as session:
            return frozenset(session.scalars(
                select(EndpointHealth.endpoint_id).where(EndpointHealth.failing_since.is_not(None))))

    def failing_endpoints(self, failing_for: timedelta, now: datetime) -> list[Failing]:
        """Enabled endpoints whose retries have failed for ``failing_for`` — counted from the
        later of the first failure and the endpoint's last change, so re-enabling (or
        fixing) an endpoint gives it a full period again."""
        started = func.greatest(EndpointHealth.failing_since, Endpoint.updated_at)
        query = (
            select(EndpointHealth.endpoint_id, started, EndpointHealth.last_error)
            .join(Endpoint, Endpoint.id == EndpointHealth.endpoint_id)
            .where(Endpoint.enabled.is_(True), EndpointHealth.failing_since.is_not(None),
                   started <= now - failing_for)
            .order_by(EndpointHealth.endpoint_id)
        )
        with self._transaction() as session:
            return [Failing(endpoint_id, since, error) for endpoint_id, since, error in session.execute(query)]

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        try:
            with Session(self._engine) as session, session.begin():
                yield session
        except OperationalError as exc:
            raise RetryLater(f"the delivery store is unreachable: {exc.orig}") from exc


def _pending(row: RetryEntry) -> Pending:
    return Pending(
        kind=Kind(row.kind), webhook_id=row.webhook_id, endpoint_id=row.endpoint_id,
        subscription_id=row.subscription_id, event_ids=tuple(row.event_ids), payload=row.payload,
        attempts=row.attempts, due_at=row.due_at,
    )


def run_retry_stage(
    claims: Sequence[Claim],
    targets: Mapping[str, Target],
    queue: RetryQueue,
    transport: TransportFactory,
    settings: StageSettings,
    *,
    clock: Callable[[], datetime] = utc_now,
    rng: Random | None = None,
    run: Run[list[State]] = asyncio.run,
    on_settled: Callable[[Sequence[State]], None] = lambda _: None,
) -> Tally:
    """Attempt the claimed deliveries once more and settle them as they finish; what happened, in counts.

    Deliveries to a subscription that is disabled or whose endpoint answered 410 Gone are
    dead-lettered unsent, as on the main path. ``on_settled`` hears of each batch of
    states once it is kept."""
    tally = Tally()
    if not claims:
        return tally
    pendings = [c.pending for c in claims]
    gone = queue.blocked({p.subscription_id for p in pendings}, ()).gone
    unsent: list[State] = [abandon(p) for p in pendings if p.subscription_id in gone]

    def settle(batch: Sequence[State]) -> None:
        queue.settle(claims, batch, clock())
        on_settled(batch)

    if unsent:
        settle(unsent)
    todo = [p for p in pendings if p.subscription_id not in gone]
    states = unsent + (attempt_all(todo, targets, transport, settings, settle, clock=clock, rng=rng, run=run)
                       if todo else [])
    for state in states:
        tally.settled(state)
    return tally


__all__ = ["Buried", "Claim", "Failing", "RetryQueue", "run_retry_stage"]
