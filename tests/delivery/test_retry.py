import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wayline.core.errors import RejectedInput
from wayline.delivery.retry import (
    DEFAULT_RETRY_POLICY,
    DEFAULT_SCHEDULE,
    RetryPolicy,
    Verdict,
    classify,
    next_attempt_at,
)
from wayline.delivery.transports.base import Failure, FailureKind, Response

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Fixed:
    """A random source that always says the same thing."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


MIDDLE = Fixed(0.5)  # no jitter either way


def status(code: int, **headers: str) -> Response:
    return Response(code, {k.replace("_", "-"): v for k, v in headers.items()}, b"", 0.01)


@pytest.mark.parametrize(
    ("outcome", "verdict"),
    [
        (status(200), Verdict.SUCCESS),
        (status(204), Verdict.SUCCESS),
        (status(410), Verdict.DISABLE),
        (status(408), Verdict.RETRY),
        (status(409), Verdict.RETRY),
        (status(425), Verdict.RETRY),
        (status(429), Verdict.RETRY),
        (status(500), Verdict.RETRY),
        (status(503), Verdict.RETRY),
        (status(400), Verdict.GIVE_UP),
        (status(404), Verdict.GIVE_UP),
        (status(301), Verdict.GIVE_UP),
        (Failure(FailureKind.TIMEOUT, "slow"), Verdict.RETRY),
        (Failure(FailureKind.CONNECTION, "refused"), Verdict.RETRY),
        (Failure(FailureKind.DEADLINE, "cut"), Verdict.RETRY),
        (Failure(FailureKind.CIRCUIT_OPEN, "open"), Verdict.RETRY),
        (Failure(FailureKind.AUTH, "no token"), Verdict.RETRY),
        (Failure(FailureKind.INVALID_REQUEST, "bad url"), Verdict.GIVE_UP),
    ],
)
def test_outcomes_are_classified(outcome: Response | Failure, verdict: Verdict) -> None:
    assert classify(outcome) is verdict


def test_an_endpoint_can_ask_for_more_4xx_to_be_retried() -> None:
    assert classify(status(404), RetryPolicy(retry_statuses=frozenset({404}))) is Verdict.RETRY


def test_without_jitter_the_default_schedule_is_followed_to_the_end() -> None:
    failed = status(500)
    expected = [NOW + delay for delay in DEFAULT_SCHEDULE[1:]] + [None]
    got = [next_attempt_at(n, failed, NOW, MIDDLE) for n in range(1, len(DEFAULT_SCHEDULE) + 1)]
    assert got == expected
    assert DEFAULT_RETRY_POLICY.max_attempts == 8


def test_jitter_stays_within_its_fraction() -> None:
    low = next_attempt_at(3, status(500), NOW, Fixed(0.0))
    high = next_attempt_at(3, status(500), NOW, Fixed(0.999999))
    assert low == NOW + timedelta(minutes=30) * 0.8
    assert high is not None and NOW + timedelta(minutes=30) * 1.19 < high < NOW + timedelta(minutes=30) * 1.2


@given(st.integers(min_value=1, max_value=7), st.randoms(use_true_random=False))
def test_every_retry_is_in_the_future_within_the_jittered_delay(attempt: int, rnd: random.Random) -> None:
    due = next_attempt_at(attempt, Failure(FailureKind.TIMEOUT, "t"), NOW, rnd)
    delay = DEFAULT_SCHEDULE[attempt]
    assert due is not None and NOW + delay * 0.8 <= due <= NOW + delay * 1.2


def test_no_next_attempt_after_success_or_permanent_failure() -> None:
    for outcome in (status(200), status(400), status(410), Failure(FailureKind.INVALID_REQUEST, "x")):
        assert next_attempt_at(1, outcome, NOW, MIDDLE) is None


def test_retry_after_seconds_pushes_a_429_later() -> None:
    assert next_attempt_at(1, status(429, retry_after="120"), NOW, MIDDLE) == NOW + timedelta(seconds=120)


def test_retry_after_http_date_is_honoured_on_503() -> None:
    header = "Sun, 01 Mar 2026 12:10:00 GMT"
    assert next_attempt_at(1, status(503, retry_after=header), NOW, MIDDLE) == NOW + timedelta(minutes=10)


def test_retry_after_never_brings_an_attempt_forward() -> None:
    # Attempt 3 fails: the schedule says 30 min; asking for 1 s does not shorten it.
    assert next_attempt_at(3, status(429, retry_after="1"), NOW, MIDDLE) == NOW + timedelta(minutes=30)


def test_retry_after_is_capped() -> None:
    capped = RetryPolicy(max_retry_after=timedelta(minutes=15))
    assert next_attempt_at(1, status(429, retry_after="86400"), NOW, MIDDLE, capped) == NOW + timedelta(minutes=15)
    huge = "9" * 40
    assert next_attempt_at(1, status(503, retry_after=huge), NOW, MIDDLE, capped) == NOW + timedelta(minutes=15)


@pytest.mark.parametrize("header", ["soon", "-5", "Sun, 01 Mar 2026 12:10:00 -0000", ""])
def test_an_unusable_retry_after_falls_back_to_the_schedule(header: str) -> None:
    assert next_attempt_at(1, status(429, retry_after=header), NOW, MIDDLE) == NOW + timedelta(seconds=5)


def test_retry_after_only_counts_on_429_and_503() -> None:
    assert next_attempt_at(1, status(500, retry_after="600"), NOW, MIDDLE) == NOW + timedelta(seconds=5)


def test_a_retry_after_at_the_last_attempt_does_not_add_one() -> None:
    assert next_attempt_at(8, status(429, retry_after="5"), NOW, MIDDLE) is None


def test_bad_policies_and_calls_are_rejected() -> None:
    with pytest.raises(RejectedInput):
        RetryPolicy(schedule=())
    with pytest.raises(RejectedInput):
        RetryPolicy(jitter=1.5)
    with pytest.raises(RejectedInput):
        next_attempt_at(0, status(500), NOW, MIDDLE)
    with pytest.raises(RejectedInput):
        next_attempt_at(1, status(500), NOW.replace(tzinfo=None), MIDDLE)
