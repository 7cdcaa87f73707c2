"""The retry policy: what an attempt's outcome means, and when to try again.

The schedule is data: ``schedule[n]`` is the delay before attempt ``n + 1``, so the
first entry (immediately) is the first attempt and the length is the number of
attempts. Delays get multiplicative jitter so that endpoints that failed together do
not all come back in the same second.

A ``Retry-After`` header on 429 or 503 is the receiver telling us when it can cope
again: it can push the next attempt later than the schedule would, up to
``max_retry_after``, but never earlier.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Protocol

from wayline.core.errors import RejectedInput
from wayline.core.settings import DEFAULT_RETRY_JITTER, DEFAULT_RETRY_SCHEDULE_S
from wayline.delivery.transports.base import Failure, FailureKind, Response, Result

DEFAULT_SCHEDULE = tuple(timedelta(seconds=s) for s in DEFAULT_RETRY_SCHEDULE_S)
DEFAULT_JITTER = DEFAULT_RETRY_JITTER
DEFAULT_MAX_RETRY_AFTER = timedelta(hours=1)

GONE = 410
# Statuses that say "not now" rather than "never": request timeout, conflict
# (often a lock), too early, and too many requests.
RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})
_PERMANENT_FAILURES = frozenset({FailureKind.INVALID_REQUEST, FailureKind.ADDRESS_REFUSED})


@dataclass(frozen=True, slots=True)
class HeldBack(Failure):
    """Not sent, so not an attempt: the circuit was open, the endpoint asked for a pause, or
    the stage deadline came while the request waited for a slot. The delivery keeps its
    attempt count and is due again ``wait_s`` after it was held back."""

    wait_s: float = 0.0


class Verdict(StrEnum):
    SUCCESS = "success"
    RETRY = "retry"
    GIVE_UP = "give_up"
    """Permanent failure: dead-letter the message."""
    DISABLE = "disable"
    """410 Gone: the receiver wants no more; disable the subscription."""


class Random(Protocol):
    """The one method of ``random.Random`` the policy needs, so tests can pin it."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to retry. ``retry_statuses`` adds 4xx codes that an endpoint wants retried."""

    schedule: tuple[timedelta, ...] = DEFAULT_SCHEDULE
    jitter: float = DEFAULT_JITTER
    max_retry_after: timedelta = DEFAULT_MAX_RETRY_AFTER
    retry_statuses: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.schedule:
            raise RejectedInput("a retry schedule needs at least one attempt")
        if any(delay < timedelta(0) for delay in self.schedule):
            raise RejectedInput("retry delays may not be negative")
        if not 0 <= self.jitter < 1:
            raise RejectedInput(f"jitter is a fraction in [0, 1), not {self.jitter}")

    @property
    def max_attempts(self) -> int:
        return len(self.schedule)


DEFAULT_RETRY_POLICY = RetryPolicy()


def classify(outcome: Result, policy: RetryPolicy = DEFAULT_RETRY_POLICY) -> Verdict:
    if isinstance(outcome, Failure):
        return Verdict.GIVE_UP if outcome.kind in _PERMANENT_FAILURES else Verdict.RETRY
    status = outcome.status
    if 200 <= status < 300:
        return Verdict.SUCCESS
    if status == GONE:
        return Verdict.DISABLE
    if status >= 500 or status in RETRYABLE_CLIENT_STATUSES or status in policy.retry_statuses:
        return Verdict.RETRY
    # 3xx is a failure too: following redirects would hide a stale endpoint URL.
    return Verdict.GIVE_UP


def next_attempt_at(
    attempt: int,
    outcome: Result,
    now: datetime,
    rng: Random,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> datetime | None:
    """When to make attempt ``attempt + 1`` after attempt ``attempt`` (1-based) had ``outcome``.

    ``None`` means no further attempt: it succeeded, it cannot succeed, or the
    schedule is used up; :func:`classify` says which.
    """
    if attempt < 1:
        raise RejectedInput(f"attempts count from 1, not {attempt}")
    if now.tzinfo is None:
        raise RejectedInput("now must be timezone-aware: Retry-After dates are absolute")
    if classify(outcome, policy) is not Verdict.RETRY or attempt >= policy.max_attempts:
        return None
    scheduled = policy.schedule[attempt]
    delay = scheduled * (1 + policy.jitter * (2 * rng.random() - 1))
    asked = retry_after(outcome, now, policy.max_retry_after)
    if asked is not None:
        delay = max(delay, asked)
    return now + delay


def retry_after(outcome: Result, now: datetime, cap: timedelta = DEFAULT_MAX_RETRY_AFTER) -> timedelta | None:
    """The delay a 429/503 asks for, capped; ``None`` when it asks for nothing usable."""
    if not isinstance(outcome, Response) or outcome.status not in RETRY_AFTER_STATUSES:
        return None
    value = outcome.headers.get("retry-after", "").strip()
    if value.isdigit():
        # Capped before building the timedelta: a huge value would overflow it.
        return timedelta(seconds=min(int(value), cap.total_seconds()))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        # A malformed header is the receiver's bug; the schedule still applies.
        return None
    if when.tzinfo is None:
        return None
    return min(max(when - now, timedelta(0)), cap)


__all__ = [
    "DEFAULT_JITTER",
    "DEFAULT_MAX_RETRY_AFTER",
    "DEFAULT_RETRY_POLICY",
    "DEFAULT_SCHEDULE",
    "GONE",
    "HeldBack",
    "RETRYABLE_CLIENT_STATUSES",
    "RETRY_AFTER_STATUSES",
    "Random",
    "RetryPolicy",
    "Verdict",
    "classify",
    "next_attempt_at",
    "retry_after",
]
