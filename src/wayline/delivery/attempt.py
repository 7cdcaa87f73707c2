"""Delivery states, one frozen type each, and the pure step from an attempt to the next state.

    Pending ──attempt──▶ Succeeded        (delivery log)
                     ├─▶ WillRetry        (retry store: the next Pending, with its due time)
                     ├─▶ DeadLettered     (dead-letter store: permanent failure or schedule used up)
                     └─▶ Gone             (410: disable the subscription; the message is dead-lettered)
    Pending ──held back──▶ WillRetry     (not sent — endpoint failing, circuit open, throttled, no slot
                                          before the deadline: attempts unchanged, due when it may go)

:class:`Pending` is also the retry store's record. It keeps the exact body, so every
attempt and every replay sends the same bytes under the same ``webhook-id``; only the
``webhook-timestamp`` and its signature are new each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from wayline.core.envelope import STRUCTURED_CONTENT_TYPE
from wayline.core.secret import Secret
from wayline.delivery.batch import BATCH_CONTENT_TYPE, Batch
from wayline.delivery.retry import (
    DEFAULT_RETRY_POLICY,
    HeldBack,
    Random,
    RetryPolicy,
    Verdict,
    classify,
    next_attempt_at,
)
from wayline.delivery.signing import batch_message_id, message_id, signed_headers
from wayline.delivery.transports.base import Endpoint, FailureKind, Request, Response, Result


class Kind(StrEnum):
    SINGLE = "single"
    BATCH = "batch"

    @property
    def content_type(self) -> str:
        return STRUCTURED_CONTENT_TYPE if self is Kind.SINGLE else BATCH_CONTENT_TYPE


class DeadLetterReason(StrEnum):
    REJECTED = "rejected"
    """The endpoint's answer (or the request itself) means retrying cannot help."""
    EXHAUSTED = "exhausted"
    """Every attempt of the schedule failed."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A delivery waiting for its next attempt: the retry store's record."""

    kind: Kind
    webhook_id: str
    endpoint_id: str
    subscription_id: str
    event_ids: tuple[str, ...]
    payload: bytes
    attempts: int
    """Attempts already made; 0 for a delivery not yet tried."""
    due_at: datetime

    @classmethod
    def first(
        cls, kind: Kind, event_ids: Sequence[str], body: bytes, *, subscription_id: str, endpoint_id: str,
        now: datetime,
    ) -> Pending:
        """A delivery not yet tried: one event, or a batch whose ``body`` holds ``event_ids``."""
        if kind is Kind.SINGLE:
            (event_id,) = event_ids
            webhook_id = message_id(event_id, subscription_id)
        else:
            webhook_id = batch_message_id(subscription_id, event_ids)
        return cls(
            kind=kind,
            webhook_id=webhook_id,
            endpoint_id=endpoint_id,
            subscription_id=subscription_id,
            event_ids=tuple(event_ids),
            payload=body,
            attempts=0,
            due_at=now,
        )

    @classmethod
    def single(cls, event_id: str, body: bytes, *, subscription_id: str, endpoint_id: str, now: datetime) -> Pending:
        return cls.first(Kind.SINGLE, (event_id,), body, subscription_id=subscription_id, endpoint_id=endpoint_id,
                         now=now)

    @classmethod
    def batch(cls, batch: Batch, *, endpoint_id: str, now: datetime) -> Pending:
        return cls.first(Kind.BATCH, batch.event_ids, batch.body, subscription_id=batch.key.subscription_id,
                         endpoint_id=endpoint_id, now=now)

    def request(self, endpoint: Endpoint, secrets: Sequence[Secret], now: datetime) -> Request:
        """The signed request for an attempt made at ``now``."""
        headers = signed_headers(self.webhook_id, int(now.timestamp()), self.payload, secrets)
        headers["content-type"] = self.kind.content_type
        return Request(endpoint, self.payload, headers)


@dataclass(frozen=True, slots=True)
class Succeeded:
    delivered: Pending
    """The delivery as it was attempted (``attempts`` not yet counting the successful one)."""
    response: Response
    at: datetime

    @property
    def attempt(self) -> int:
        return self.delivered.attempts + 1


@dataclass(frozen=True, slots=True)
class WillRetry:
    next: Pending
    """The record for the retry store: attempts counted, due time set."""
    outcome: Result

    @property
    def held_back(self) -> bool:
        """Not sent at all: no attempt was made or counted."""
        return isinstance(self.outcome, HeldBack)


@dataclass(frozen=True, slots=True)
class DeadLettered:
    failed: Pending
    """The record as finally attempted: ``attempts`` counts every attempt made."""
    outcome: Result
    reason: DeadLetterReason


@dataclass(frozen=True, slots=True)
class Gone:
    failed: Pending
    response: Response


State = Succeeded | WillRetry | DeadLettered | Gone


def defer(pending: Pending, now: datetime, why: str = "is failing") -> WillRetry:
    """Hand ``pending`` to the retry path unsent, due at once, with no attempt counted;
    ``why`` says what is wrong with its endpoint."""
    return hold(pending, HeldBack(
        FailureKind.DEFERRED, f"endpoint {pending.endpoint_id} {why}; the retry path sends its messages"), now)


def hold(pending: Pending, why: HeldBack, now: datetime) -> WillRetry:
    """``pending`` was not sent: it keeps its attempt count and is due when it may go."""
    return WillRetry(replace(pending, due_at=now + timedelta(seconds=why.wait_s)), why)


def settle(
    attempted: Pending,
    outcome: Result,
    now: datetime,
    rng: Random,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> State:
    """Where a delivery goes after one attempt at ``now`` that had ``outcome``.

    An outcome that says the request was never sent is no attempt: the budget of the
    retry schedule is spent only on requests the endpoint could have answered."""
    if isinstance(outcome, HeldBack):
        return hold(attempted, outcome, now)
    verdict = classify(outcome, policy)
    if verdict is Verdict.SUCCESS and isinstance(outcome, Response):
        return Succeeded(attempted, outcome, now)
    tried = replace(attempted, attempts=attempted.attempts + 1)
    if verdict is Verdict.DISABLE and isinstance(outcome, Response):
        return Gone(tried, outcome)
    if verdict is Verdict.GIVE_UP:
        return DeadLettered(tried, outcome, DeadLetterReason.REJECTED)
    due = next_attempt_at(tried.attempts, outcome, now, rng, policy)
    if due is None:
        return DeadLettered(tried, outcome, DeadLetterReason.EXHAUSTED)
    return WillRetry(replace(tried, due_at=due), outcome)


__all__ = [
    "DeadLetterReason",
    "DeadLettered",
    "Gone",
    "Kind",
    "Pending",
    "State",
    "Succeeded",
    "WillRetry",
    "defer",
    "hold",
    "settle",
]
