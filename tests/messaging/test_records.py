"""Publish bodies are read and every event checked before anything is written."""

import orjson
import pytest

from wayline.core.errors import RejectedInput
from wayline.core.settings import EnvelopeSettings
from wayline.messaging.errors import NotJson, TooLarge
from wayline.messaging.records import Outgoing, Refused, check, read_body


class NoSchemas:
    def problem(self, event_type, data):
        return None


class PositiveAmounts:
    def problem(self, event_type, data):
        return "data.amount: -1 is less than the minimum of 0" if data.get("amount", 0) < 0 else None


def event(n: int = 1, **overrides) -> dict:
    body = {"specversion": "1.0", "id": f"e{n}", "source": "/tests", "type": "order.created", "tenantid": "t-a",
            "data": {"amount": n}}
    body.update(overrides)
    return body


def test_one_object_is_one_event_and_an_array_a_batch() -> None:
    assert read_body(orjson.dumps(event()), 10) == ([event()], False)
    assert read_body(orjson.dumps([event(1), event(2)]), 10) == ([event(1), event(2)], True)


@pytest.mark.parametrize(("body", "error", "message"), [
    (b"", RejectedInput, "the body is empty"),
    (b"<html>", NotJson, "the body is not JSON"),
    (b"42", RejectedInput, "must be a CloudEvent"),
    (b"[]", RejectedInput, "the batch is empty"),
    (orjson.dumps([event(n) for n in range(4)]), TooLarge, "the batch has 4 events, over the limit of 3"),
])
def test_bodies_that_are_not_events_are_refused_whole(body: bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        read_body(body, 3)


def test_each_event_is_checked_on_its_own_and_named_in_its_refusal() -> None:
    missing = event(2)
    del missing["tenantid"]
    events = [event(1), missing, event(3, data={"blob": "x" * 2000}), event(4, specversion="0.3"), "text"]
    results = check(events, EnvelopeSettings(max_bytes=1024), NoSchemas())
    assert results[0] == Outgoing(0, b"t-a", orjson.dumps(event(1)))
    assert [(r.code, r.message) for r in results[1:] if isinstance(r, Refused)] == [
        ("missing_tenant", "event 1 (id 'e2'): the tenantid extension attribute is missing"),
        ("oversize", f"event 2 (id 'e3'): value is {len(orjson.dumps(events[2]))} bytes, over the 1024-byte limit"),
        ("bad_specversion", "event 3 (id 'e4'): specversion must be 1.0"),
        ("not_object", "event 4: the value is JSON but not an object"),
    ]


def test_an_event_that_does_not_match_its_schema_is_refused() -> None:
    ok, bad = check([event(1), event(2, data={"amount": -1})], EnvelopeSettings(max_bytes=1024), PositiveAmounts())
    assert isinstance(ok, Outgoing)
    assert bad == Refused(1, "schema_mismatch", "event 1 (id 'e2'): data does not match the schema of "
                                                "order.created: data.amount: -1 is less than the minimum of 0")


def test_a_time_too_far_ahead_of_the_clock_or_outside_years_1_to_9999_is_refused() -> None:
    """The pipelines quarantine the same events (tests/envelope_corpus.py): one definition of a valid time."""
    from datetime import UTC, datetime, timedelta

    soon = (datetime.now(UTC) + timedelta(seconds=60)).isoformat()
    events = [event(1, time=soon), event(2, time="9999-12-31T23:59:59Z"), event(3, time="0000-01-01T00:00:00Z")]
    results = check(events, EnvelopeSettings(max_future_skew_s=300), NoSchemas())
    assert isinstance(results[0], Outgoing)
    assert [(r.code, r.message) for r in results[1:] if isinstance(r, Refused)] == [
        ("future_time", "event 1 (id 'e2'): the event time is more than 300 s ahead of the clock"),
        ("bad_time", "event 2 (id 'e3'): time is not an RFC 3339 timestamp from year 1 to 9999 (UTC)"),
    ]
