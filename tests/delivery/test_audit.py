"""The self-audit's outcome records."""

from datetime import UTC, datetime

import orjson

from wayline.delivery import audit
from wayline.delivery.attempt import DeadLettered, DeadLetterReason, Pending, Succeeded, defer
from wayline.delivery.transports.base import Failure, FailureKind, Response

AT = datetime(2026, 11, 24, 12, 0, 0, 250000, tzinfo=UTC)


def pending(event_id: str) -> Pending:
    return Pending.single(event_id, b"{}", subscription_id="sub_1", endpoint_id="ep_1", now=AT)


def test_final_states_get_one_outcome_per_event_stamped_once_and_the_rest_none() -> None:
    states = [Succeeded(pending("e1"), Response(200, {}, b"", 0.1), AT),
              DeadLettered(pending("e2"), Failure(FailureKind.INVALID_REQUEST, "no"), DeadLetterReason.REJECTED),
              defer(pending("e3"), AT)]
    events = audit.outcome_events(states, {"e1": "events.orders"}, "wayline.batches", AT)
    assert [key for key, _ in events] == [b"sub_1/e1", b"sub_1/e2"]
    first, second = (orjson.loads(value) for _, value in events)
    assert first == {
        "specversion": "1.0", "id": "outcomes:sub_1/e1:delivered", "source": audit.SOURCE,
        "type": "wayline.audit.outcomes", "tenantid": audit.TENANT, "time": "2026-11-24T12:00:00.250000+00:00",
        "data": {"record": "sub_1/e1", "event_id": "e1", "event_time": "2026-11-24T12:00:00.250000+00:00",
                 "topic": "events.orders", "outcome": "delivered"},
    }
    assert (second["data"]["outcome"], second["data"]["topic"]) == ("dead_lettered", "wayline.batches")
    # The same record whether its time comes as a datetime or already formatted.
    assert events[0][1] == audit.audit_event(audit.OUTCOMES, "sub_1/e1", "delivered", "e1", "events.orders", AT)
