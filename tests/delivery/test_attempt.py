from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
from standardwebhooks import Webhook

from wayline.core.envelope import STRUCTURED_CONTENT_TYPE
from wayline.core.secret import Secret
from wayline.delivery.attempt import DeadLettered, DeadLetterReason, Gone, Kind, Pending, Succeeded, WillRetry, settle
from wayline.delivery.batch import BATCH_CONTENT_TYPE, Batch, BatchItem, BatchKey
from wayline.delivery.retry import HeldBack, RetryPolicy
from wayline.delivery.signing import batch_message_id, message_id
from wayline.delivery.transports.base import Endpoint, Failure, FailureKind, Response

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BODY = orjson.dumps({"specversion": "1.0", "id": "e1", "source": "/s", "type": "t", "tenantid": "7"})
ENDPOINT = Endpoint(id="ep_1", url="http://127.0.0.1:9/hook")


class NoJitter:
    def random(self) -> float:
        return 0.5


def pending() -> Pending:
    return Pending.single("e1", BODY, subscription_id="sub_1", endpoint_id="ep_1", now=NOW)


def test_a_single_delivery_carries_its_stable_id() -> None:
    p = pending()
    assert (p.kind, p.webhook_id, p.event_ids, p.attempts, p.due_at) == (
        Kind.SINGLE,
        message_id("e1", "sub_1"),
        ("e1",),
        0,
        NOW,
    )


def test_a_batch_delivery_carries_the_batch_body_and_id() -> None:
    batch = Batch(BatchKey("sub_1", 3), (BatchItem("e1", BODY), BatchItem("e2", BODY)))
    p = Pending.batch(batch, endpoint_id="ep_1", now=NOW)
    assert p.kind is Kind.BATCH and p.payload == batch.body
    assert p.webhook_id == batch_message_id("sub_1", ["e1", "e2"])
    assert p.event_ids == ("e1", "e2")


def test_the_request_is_signed_and_typed_for_its_kind() -> None:
    secret = Secret.generate()
    now = datetime.now(UTC)
    request = pending().request(ENDPOINT, [secret], now)
    assert request.headers["content-type"] == STRUCTURED_CONTENT_TYPE
    assert request.headers["webhook-timestamp"] == str(int(now.timestamp()))
    assert Webhook(secret.text).verify(request.body, dict(request.headers))["id"] == "e1"
    assert Kind.BATCH.content_type == BATCH_CONTENT_TYPE


def test_a_retry_is_signed_anew_under_the_same_id() -> None:
    secret = Secret.generate()
    now = datetime.now(UTC)
    first = pending().request(ENDPOINT, [secret], now - timedelta(minutes=10))
    again = pending().request(ENDPOINT, [secret], now)
    assert first.headers["webhook-id"] == again.headers["webhook-id"]
    assert first.headers["webhook-signature"] != again.headers["webhook-signature"]
    assert first.body == again.body
    # The receiver's replay window rejects the old timestamp but takes the new one.
    Webhook(secret.text).verify(again.body, dict(again.headers))


def test_success_goes_to_the_delivery_log() -> None:
    ok = Response(200, {}, b"", 0.02)
    state = settle(pending(), ok, NOW, NoJitter())
    assert isinstance(state, Succeeded) and state.attempt == 1 and state.at == NOW


def test_a_transient_failure_is_scheduled_with_its_attempt_counted() -> None:
    state = settle(pending(), Failure(FailureKind.DEADLINE, "cut"), NOW, NoJitter())
    assert isinstance(state, WillRetry)
    assert state.next.attempts == 1
    assert state.next.due_at == NOW + timedelta(seconds=5)
    assert state.next.webhook_id == pending().webhook_id


def test_the_last_failure_dead_letters_as_exhausted() -> None:
    policy = RetryPolicy(schedule=(timedelta(0), timedelta(seconds=1)))
    first = settle(pending(), Response(500, {}, b"", 0.1), NOW, NoJitter(), policy)
    assert isinstance(first, WillRetry)
    last = settle(first.next, Response(502, {}, b"", 0.1), NOW, NoJitter(), policy)
    assert isinstance(last, DeadLettered)
    assert last.reason is DeadLetterReason.EXHAUSTED and last.failed.attempts == 2


def test_a_permanent_failure_dead_letters_at_once() -> None:
    state = settle(pending(), Response(400, {}, b"bad", 0.1), NOW, NoJitter())
    assert isinstance(state, DeadLettered)
    assert state.reason is DeadLetterReason.REJECTED and state.failed.attempts == 1


def test_gone_asks_for_the_subscription_to_be_disabled() -> None:
    state = settle(pending(), Response(410, {}, b"", 0.1), NOW, NoJitter())
    assert isinstance(state, Gone) and state.response.status == 410 and state.failed.attempts == 1


def test_a_request_that_never_left_keeps_its_attempts_even_on_the_last_one() -> None:
    last = replace(pending(), attempts=2)
    policy = RetryPolicy(schedule=(timedelta(0),) * 3)
    held = settle(last, HeldBack(FailureKind.CIRCUIT_OPEN, "open", wait_s=12), NOW, NoJitter(), policy)
    assert isinstance(held, WillRetry) and held.held_back
    assert (held.next.attempts, held.next.due_at) == (2, NOW + timedelta(seconds=12)), "not dead-lettered"
    sent = settle(last, Failure(FailureKind.DEADLINE, "no response"), NOW, NoJitter(), policy)
    assert isinstance(sent, DeadLettered) and sent.failed.attempts == 3, "one that left is an attempt"
