from datetime import datetime, timezone

import pytest

from tests.envelope_corpus import ATTRIBUTE_CASES, CASES, MAX_BYTES, MAX_FUTURE_SKEW_S, Case, expected_detail
from wayline.core.envelope import Envelope, Rejection, parse_record, to_structured


@pytest.mark.parametrize("case", CASES + ATTRIBUTE_CASES, ids=lambda case: case.name)
def test_each_record_gets_its_verdict(case: Case) -> None:
    verdict = parse_record(case.value, case.headers, max_bytes=MAX_BYTES, max_future_skew_s=MAX_FUTURE_SKEW_S)
    if case.reason is None:
        assert isinstance(verdict, Envelope), verdict
        assert verdict.time == case.time
    else:
        assert verdict == Rejection(reason=case.reason, detail=expected_detail(case))


def test_structured_event_fields_are_typed() -> None:
    value = b'{"specversion":"1.0","id":"e1","source":"/s","type":"a.b","tenantid":"t-1",' \
            b'"subtenantid":"d-1","time":"2026-11-22T07:00:00.5Z","data":{"x":[1,2]}}'
    envelope = parse_record(value, max_bytes=MAX_BYTES)
    assert envelope == Envelope(
        id="e1", source="/s", type="a.b", tenantid="t-1", subtenantid="d-1",
        time=datetime(2026, 11, 22, 7, 0, 0, 500000, tzinfo=timezone.utc), data={"x": [1, 2]},
    )


def test_binary_mode_takes_attributes_from_headers_and_data_from_value() -> None:
    headers = [("ce_specversion", b"1.0"), ("ce_id", b"e2"), ("ce_source", b"/s"),
               ("ce_type", b"t"), ("ce_tenantid", b"t-2"), ("traceparent", b"00-abc")]
    envelope = parse_record(b'{"k": 1}', headers, max_bytes=MAX_BYTES)
    assert envelope == Envelope(id="e2", source="/s", type="t", tenantid="t-2", data={"k": 1})


def test_size_limit_is_configurable() -> None:
    value = to_structured(Envelope(id="e", source="/s", type="t", tenantid="t", data={"pad": "x" * 50}))
    assert isinstance(parse_record(value, max_bytes=len(value)), Envelope)
    rejected = parse_record(value, max_bytes=len(value) - 1)
    assert isinstance(rejected, Rejection) and rejected.reason == "oversize"


def test_to_structured_round_trips() -> None:
    original = Envelope(
        id="e3", source="/s", type="t.x", tenantid="t-3", subtenantid="d-7", subject="s/1",
        time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), data={"a": None, "b": [True]},
    )
    assert parse_record(to_structured(original), max_bytes=MAX_BYTES) == original
